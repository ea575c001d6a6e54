"""Spark plumbing shared by the bulk catch-up and `baton audit`.

Two halves: the driver's SparkSession factory, and what runs inside executors for both
users (the Kafka range reader, ranges and chunks, job loading, the fold's state).

The session. Why a factory: a JVM holds one SparkContext, and starting it costs
seconds, so a process builds its session once and reuses it for every bulk catch-up
(thread-safe: the processor starts it on a worker thread). The driver binds
to 127.0.0.1 (executors of a local cluster connect back to it there), the UI is off,
Python workers run this interpreter (the job's code and Baton must import there), and
shuffles use few partitions (the bulk path chooses its own counts). Before starting the
JVM we check the two things an operator most often gets wrong, with errors saying what
to do: Java missing (or too old), and a `spark://` master that does not answer.

`local[N]` runs tasks without retries by default; we ask for `local[N,attempts]` so a
failed task is retried as on a cluster before the bulk path gives up.

The executor side is plain Python over confluent-kafka (no Spark Kafka connector): it
is imported by name in every Python worker, so it must not import pyspark eagerly.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from processor.job import Job, Record, load_job
from store import decode_key, decode_value, encode_key, encode_value

__all__ = [
    "Chunk",
    "FoldState",
    "Ranges",
    "ReadError",
    "SparkError",
    "SparkUnavailableError",
    "Timings",
    "key_partition",
    "load_job",
    "parse_ranges",
    "plan_chunks",
    "read_batches",
    "read_range",
    "replay",
    "spark_failure",
    "spark_session",
    "startup_seconds",
    "stop_spark",
]

Ranges = Mapping[str, tuple[int, int]]

# Spark 4 runs on Java 17 or later.
JAVA_MIN_MAJOR = 17
# Task attempts before a stage (and so the bulk catch-up) fails; Spark's cluster default.
TASK_ATTEMPTS = 4
# Shuffle partitions of SQL plans; the bulk path sets its own RDD partition counts.
SHUFFLE_PARTITIONS = 4
# A spark:// master that does not accept a TCP connection in this time is unreachable.
MASTER_CONNECT_TIMEOUT_S = 5.0
# A cluster that grants no executor in this time cannot run the job (no free workers).
EXECUTOR_WAIT_S = 60.0

_LOCAL = re.compile(r"^local(\[(\*|\d+)\])?$")
_lock = threading.Lock()
_session: Any = None
_master: str | None = None
_startup_s: float | None = None


class SparkError(RuntimeError):
    """Spark could not run Baton's work; callers fall back to the consumer path."""


class SparkUnavailableError(SparkError):
    """No SparkSession could be started: Java or the master is missing."""


def spark_session(master: str, app_name: str = "baton") -> Any:
    """The process's SparkSession for `master`, started on first use.

    Args:
        master: `local[*]`, `local[N]` or a cluster URL such as `spark://host:7077`.
        app_name: the application name the master shows.

    Returns:
        A `pyspark.sql.SparkSession` (typed Any: pyspark ships no stubs).

    Raises:
        SparkUnavailableError: Java 17 is missing, the master is unreachable or grants
            no executor, or a session for another master is already running.
    """
    global _session, _master, _startup_s
    with _lock:
        if _session is not None and master == _master:
            return _session
        started = time.monotonic()
        _check_java()
        _check_master(master)
        if _session is not None:
            raise SparkUnavailableError(
                f"a SparkSession for {_master} already runs in this process; cannot start "
                f"one for {master} (one SparkContext per JVM): stop_spark() first")
        session = _build(master, app_name)
        _wait_for_executors(session, master)
        _session, _master = session, master
        _startup_s = time.monotonic() - started
        return session


def startup_seconds() -> float | None:
    """How long the current session took to start (None before the first one)."""
    return _startup_s


def stop_spark() -> None:
    """Stop the process's session (tests, benchmarks, shutdown); a no-op without one."""
    global _session, _master
    with _lock:
        session, _session, _master = _session, None, None
        if session is not None:
            session.stop()


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def _check_java() -> None:
    """Fail with an instruction, not a Py4J stack trace, when Java is missing or old."""
    java = _java()
    hint = "install Java 17 (e.g. the openjdk-17-jre-headless package) or set JAVA_HOME"
    if java is None:
        raise SparkUnavailableError(f"PySpark needs Java {JAVA_MIN_MAJOR}+ and none was "
                                    f"found on PATH or in JAVA_HOME: {hint}")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True,
                             timeout=30, check=False).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkUnavailableError(f"cannot run {java} -version ({exc}): {hint}") from None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if found is None:
        raise SparkUnavailableError(f"{java} -version printed no version: {hint}")
    major = int(found.group(1))
    if major == 1 and found.group(2):  # "1.8.0" is Java 8
        major = int(found.group(2))
    if major < JAVA_MIN_MAJOR:
        raise SparkUnavailableError(
            f"PySpark needs Java {JAVA_MIN_MAJOR}+, {java} is Java {major}: {hint}")


def _check_master(master: str) -> None:
    """A spark:// master must accept a connection; Spark itself would only hang."""
    if not master.startswith("spark://"):
        return
    reason: OSError | None = None
    for hostport in master.removeprefix("spark://").split(","):
        host, _, port = hostport.rpartition(":")
        if not port.isdigit():
            raise SparkUnavailableError(f"Spark master {master}: {hostport} is not host:port")
        try:
            with socket.create_connection((host, int(port)), MASTER_CONNECT_TIMEOUT_S):
                return
        except OSError as exc:
            reason = exc
    raise SparkUnavailableError(
        f"Spark master {master} is unreachable ({reason}); start the master or fix "
        "[spark] master in the config")


def _effective_master(master: str) -> str:
    """`local[N]` -> `local[N,attempts]`: local mode retries no task otherwise."""
    found = _LOCAL.match(master)
    if found is None:
        return master
    return f"local[{found.group(2) or 1},{TASK_ATTEMPTS}]"


def _build(master: str, app_name: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(_effective_master(master)).appName(app_name)
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
               .config("spark.task.maxFailures", str(TASK_ATTEMPTS))
               .config("spark.pyspark.python", sys.executable)
               .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable))
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - pyspark raises bare errors for a dead JVM
        raise SparkUnavailableError(
            f"could not start Spark for master {master}: {exc}; PySpark needs Java "
            f"{JAVA_MIN_MAJOR}+ (JAVA_HOME={os.environ.get('JAVA_HOME', '<unset>')})"
        ) from exc
    session.sparkContext.setLogLevel("ERROR")
    return session


def _wait_for_executors(session: Any, master: str) -> None:
    """On a cluster, wait until an executor registers: a job would otherwise hang."""
    if _LOCAL.match(master):
        return
    deadline = time.monotonic() + EXECUTOR_WAIT_S
    status = session.sparkContext._jsc.sc().getExecutorMemoryStatus()
    while status.size() <= 1:  # the driver counts as one
        if time.monotonic() > deadline:
            session.stop()
            raise SparkUnavailableError(
                f"Spark master {master} granted no executor in {EXECUTOR_WAIT_S:.0f}s; "
                "check that its workers are alive and have free cores and memory")
        time.sleep(0.2)
        status = session.sparkContext._jsc.sc().getExecutorMemoryStatus()


# -- executor side, shared by the bulk path and the audit ------------------------------

# Records per consume() call: large batches amortise the Python/C boundary.
CONSUME_BATCH = 10_000
# Longest wait of one consume() call (it returns early once it has the records asked for).
CONSUME_WAIT_S = 0.2
# A reader that gets no record and no progress this long is stuck (e.g. end beyond the
# last stable offset, or the broker is gone): fail the Spark task, Spark retries it.
READ_IDLE_TIMEOUT_S = 30.0


class ReadError(SparkError):
    """A range could not be read (raised in an executor; Spark retries the task)."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """A contiguous offset range of one partition: one Spark read task.

    `order` is the position of its range in the caller's `ranges`: under the bulk
    path's shuffle plan a key's records are folded in (order, offset) order.
    """

    order: int
    topic: str
    partition: int
    start: int
    end: int


def read_range(settings: Mapping[str, Any], topic: str, partition: int, start: int,
               end: int, idle_timeout_s: float = READ_IDLE_TIMEOUT_S) -> Iterator[Any]:
    """Committed messages of topic:partition with start <= offset < end, in order.

    See `read_batches`, which this flattens.
    """
    for batch in read_batches(settings, topic, partition, start, end, idle_timeout_s):
        yield from batch


def read_batches(settings: Mapping[str, Any], topic: str, partition: int, start: int,
                 end: int, idle_timeout_s: float = READ_IDLE_TIMEOUT_S) -> Iterator[list[Any]]:
    """Committed messages of topic:partition with start <= offset < end, in order, in
    batches (hot loops iterate lists, not a generator per record).

    Args:
        settings: librdkafka settings (bootstrap servers and any broker quirks).
        topic, partition, start, end: the range; `end` is exclusive.
        idle_timeout_s: fail after this long without progress.

    Yields:
        Non-empty lists of confluent_kafka.Message (aborted records and transaction
        markers are skipped by the client).

    Raises:
        ReadError: the range cannot be read (log start above `start`, no
            progress, a broker error); the message names the partition and offsets.
    """
    if end <= start:
        return
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({**settings, "group.id": "baton.reader", "enable.auto.commit": False,
                         "enable.auto.offset.store": False, "auto.offset.reset": "error",
                         "isolation.level": "read_committed", "enable.partition.eof": False})
    where = f"{topic}:{partition} [{start}, {end})"
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        position, idle_since = start, time.monotonic()
        while position < end:
            # consume() waits for the full count: never ask for more than the range holds
            batch = consumer.consume(min(CONSUME_BATCH, end - position), CONSUME_WAIT_S)
            if batch:
                idle_since = time.monotonic()
                batch, position = _in_range(batch, start, end, where)
                if batch:
                    yield batch
                continue
            position = max(position, consumer.position([TopicPartition(topic, partition)])[0]
                           .offset)
            if time.monotonic() - idle_since > idle_timeout_s:
                raise ReadError(
                    f"reading {where}: stuck at offset {position} for {idle_timeout_s:.0f}s; "
                    "is the end beyond the partition's last stable offset, or is the broker "
                    "down?")
    except KafkaException as exc:
        raise ReadError(f"reading {where}: {exc}") from exc
    finally:
        consumer.close()


def _in_range(batch: list[Any], start: int, end: int, where: str) -> tuple[list[Any], int]:
    """The batch's messages within [start, end), and the position after it."""
    for msg in batch:
        if msg.error() is not None:
            raise ReadError(f"reading {where} near offset {batch[0].offset()}: "
                                   f"{msg.error()}; is the input retained from {start}?")
    first, last = batch[0].offset(), batch[-1].offset()
    if first >= start and last < end:
        return batch, last + 1
    kept = [msg for msg in batch if start <= msg.offset() < end]
    return kept, end if last >= end else last + 1


def parse_ranges(ranges: Ranges) -> list[Chunk]:
    """Validate {"topic:N": (start, end)} into one whole-range Chunk per entry, in order.

    Raises:
        ValueError: a malformed partition name or offsets, or no ranges at all.
    """
    out = []
    for order, (name, bounds) in enumerate(ranges.items()):
        found = re.fullmatch(r"(.+):(\d+)", name)
        start, end = bounds
        if found is None or not (isinstance(start, int) and isinstance(end, int)
                                 and 0 <= start <= end):
            raise ValueError(f"range {name!r}: {bounds!r}: need 'topic:N': (start, end) "
                             "with 0 <= start <= end")
        out.append(Chunk(order, found.group(1), int(found.group(2)), start, end))
    if not out:
        raise ValueError("no ranges to catch up")
    return out


def plan_chunks(ranges: Ranges, chunk_records: int | None = None) -> list[Chunk]:
    """One read chunk per non-empty range, or sub-ranges of `chunk_records` offsets."""
    chunks: list[Chunk] = []
    for whole in parse_ranges(ranges):
        step = chunk_records or max(whole.end - whole.start, 1)
        chunks.extend(Chunk(whole.order, whole.topic, whole.partition, lo,
                            min(lo + step, whole.end))
                      for lo in range(whole.start, whole.end, step))
    return chunks


def key_partition(key: bytes | None) -> int:
    """A stable hash of a record key (Python's hash() differs between processes)."""
    return zlib.crc32(key) if key is not None else 0


_dumps = orjson.dumps
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError


def _decode(raw: bytes) -> Any:
    """The store's value decoding, with orjson's fast path inlined."""
    try:
        return _loads(raw)
    except _JSONDecodeError:
        return decode_value(raw)


class FoldState(MutableMapping[Any, Any]):
    """A job's state during a fold, with the task store's semantics.

    Values are JSON-encoded on write and decoded on read, as TaskStore does, so a job
    sees exactly what it would see on the consumer path (tuples come back as lists,
    in-place mutation of a read value changes nothing); keys are normalised the same
    way. `begin`/`rollback` undo one record's writes, as the consumer path does when
    process() raises (see `replay`).
    """

    __slots__ = ("raw", "_undo")

    def __init__(self) -> None:
        self.raw: dict[Any, bytes] = {}
        self._undo: list[tuple[Any, bytes | None]] = []

    def __getitem__(self, key: Any) -> Any:
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise(key)
        return _decode(self.raw[key])

    def get(self, key: Any, default: Any = None) -> Any:  # the hot path: kept flat
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise(key)
        raw = self.raw.get(key)
        if raw is None:
            return default
        try:
            return _loads(raw)
        except _JSONDecodeError:
            return decode_value(raw)

    def __setitem__(self, key: Any, value: Any) -> None:
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise(key)
        try:
            encoded = _dumps(value)
        except TypeError:
            encoded = encode_value(value)
        raw = self.raw
        self._undo.append((key, raw.get(key)))
        raw[key] = encoded

    def __delitem__(self, key: Any) -> None:
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise(key)
        self._undo.append((key, self.raw.pop(key)))

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes | str) and key in self.raw

    def __iter__(self) -> Iterator[Any]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    def begin(self) -> None:
        """Start one record's undo log."""
        self._undo.clear()

    def rollback(self) -> None:
        """Undo the writes since `begin`."""
        raw = self.raw
        for key, previous in reversed(self._undo):
            if previous is None:
                raw.pop(key, None)
            else:
                raw[key] = previous
        self._undo.clear()


def _normalise(key: Any) -> Any:
    """The store's key normalisation: exact bytes or str, or TypeError."""
    return decode_key(encode_key(key))


# runs a generator to its end, discarding what it yields, without a Python-level loop
_drain: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


def replay(job: Job, state: FoldState, record: Record) -> bool:
    """process() one record, output discarded; False if it raised (its writes undone).

    A failing record is skipped as the consumer path's replica skips it: its owner
    either skipped it too (on_error skip/dlq) or never committed past it (fail).
    """
    state.begin()
    try:
        _drain(job.process(record, state) or ())
    except Exception:  # noqa: BLE001 - user code, see the docstring
        state.rollback()
        return False
    return True


class Timings:
    """Accumulator parameter summing {"name": number} dicts across executor tasks."""

    def zero(self, value: dict[str, float]) -> dict[str, float]:
        return {}

    def addInPlace(self, a: dict[str, float], b: dict[str, float]) -> dict[str, float]:  # noqa: N802
        for name, amount in b.items():
            a[name] = a.get(name, 0.0) + amount
        return a


def spark_failure(exc: BaseException) -> str:
    """The useful line of a Spark job failure (the Python error, not the JVM trace)."""
    text = str(exc)
    found = re.findall(r"^\S*(?:Error|Exception): .*$", text, flags=re.MULTILINE)
    python = [line for line in found if not line.startswith(("org.", "java.", "py4j."))]
    line = (python or found or [text.strip().splitlines()[0] if text.strip() else repr(exc)])
    return str(line[-1])[:1000]
