"""Spark bulk catch-up: rebuild a task's state from a large backlog in parallel.

Theory of operation
-------------------
1. *Read.* One Spark task per (partition, offset range) reads it with a plain
   confluent-kafka consumer (assign + consume, read_committed) inside the executor, so
   no Spark Kafka connector is needed, and groups the records by key, in offset order.
   A range can be cut into sub-ranges (`chunk_records`) to read one partition on several
   cores; this is off by default because a read_committed fetch starting mid-partition
   is only as good as the broker's aborted-transaction index: noida-db 0.2.3 reports
   transactions that ended before the fetch offset, and the client then drops the rest
   of that producer's records. Reads from a range's start (the log start, for a fresh
   warmup) are safe everywhere, and the shuffle spreads the fold over every core anyway.
2. *Shuffle.* The per-chunk groups are hash-partitioned on the record key (crc32, the
   same on every host), so every record of a key meets in one reduce task whatever chunk
   or partition it came from. We shuffle rather than fold one Spark task per partition
   because a warmup's S2 is often ONE partition (no parallelism otherwise), and a key can
   span ranges (after a split, a parent partition precedes the child's own).
3. *Fold.* A reduce task puts each key's pieces in (range order, offset) order and
   folds them: source `input` runs the job's `process()` on a single-key state (values
   JSON round-tripped as the task store does, output discarded); source `changelog`
   keeps the last write (a null value deletes). `process()` must keep its state under
   keys derived from the record's key: the fold of one key sees no other key's state.
4. *Write.* Each reduce task writes one sorted SST with `store.write_sst` on its own
   disk and returns the file's BYTES: on a cluster the executors' disks are not the
   driver's. Reduce task 0 also carries T2 (the range ends). The driver persists the
   results, then streams them one file at a time into its own directory.
5. *Ingest.* `ingest_bulk` hands every file to ONE `TaskStore.ingest` call, which RocksDB
   applies atomically (all files or none), so the store never holds half a catch-up and
   T2 lands with the data. The store must be empty: ingested files can add and override
   keys but cannot delete, and the input fold starts from an empty state.
"""

from __future__ import annotations

import functools
import importlib
import math
import re
import shutil
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from processor.job import Job, Record
from processor.spark import SparkError
from store import decode_key, decode_value, encode_key, encode_value, write_sst

__all__ = [
    "BulkCatchUpError",
    "BulkResult",
    "Chunk",
    "FoldState",
    "KeyFilter",
    "Ranges",
    "Source",
    "bulk_catch_up",
    "decode_changelog",
    "encode_changelog",
    "group_chunks",
    "ingest_bulk",
    "key_partition",
    "load_job",
    "parse_ranges",
    "plan_chunks",
    "read_range",
    "spark_failure",
]

Ranges = Mapping[str, tuple[int, int]]
Source = Literal["input", "changelog"]
KeyFilter = Callable[[bytes | None], bool]

# Records per consume() call: large batches amortise the Python/C boundary.
CONSUME_BATCH = 10_000
# Longest wait of one consume() call (it returns early once it has the records asked for).
CONSUME_WAIT_S = 0.2
# A reader that gets no record and no progress this long is stuck (e.g. end beyond the
# last stable offset, or the broker is gone): fail the Spark task, Spark retries it.
READ_IDLE_TIMEOUT_S = 30.0
# Records per SST file (one reduce task each): bounds a reduce task's memory and keeps
# every file well under Spark's 2 GB block limit.
RECORDS_PER_SST = 2_000_000


class BulkCatchUpError(SparkError):
    """The bulk path failed (after Spark's task retries); fall back to the consumer."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """A contiguous offset range of one partition: one Spark read task.

    `order` is the position of its range in the caller's `ranges`: a key's records are
    folded in (order, offset) order.
    """

    order: int
    topic: str
    partition: int
    start: int
    end: int


@dataclass
class BulkResult:
    """SST files on the driver plus T2, ready for `ingest_bulk` (which removes them)."""

    task: str
    source: Source
    directory: Path
    sst_paths: list[Path]
    offsets: dict[str, int]
    records: int = 0
    keys: int = 0
    # seconds: "read", "fold", "write" summed over executor tasks; "spark" (driver wall
    # time of the Spark jobs), "fetch" (files to the driver), "ingest", "total"
    timings: dict[str, float] = field(default_factory=dict)

    def cleanup(self) -> None:
        """Remove the files (ingest copies them into the store)."""
        shutil.rmtree(self.directory, ignore_errors=True)


# -- the reader (shared with `baton audit`) ---------------------------------------------


def read_range(settings: Mapping[str, Any], topic: str, partition: int, start: int,
               end: int, idle_timeout_s: float = READ_IDLE_TIMEOUT_S) -> Iterator[Any]:
    """Committed messages of topic:partition with start <= offset < end, in order.

    Args:
        settings: librdkafka settings (bootstrap servers and any broker quirks).
        topic, partition, start, end: the range; `end` is exclusive.
        idle_timeout_s: fail after this long without progress.

    Yields:
        confluent_kafka.Message objects (aborted records and markers are skipped).

    Raises:
        BulkCatchUpError: the range cannot be read (log start above `start`, no
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
            for msg in batch:
                if msg.error() is not None:
                    raise BulkCatchUpError(f"reading {where} at {position}: {msg.error()}; "
                                           "is the input retained from the range start?")
                offset = msg.offset()
                if offset < start:  # a batch fetched from its first offset
                    continue
                if offset >= end:
                    position = end
                    break
                yield msg
                position = offset + 1
            if batch:
                idle_since = time.monotonic()
                continue
            position = max(position, consumer.position([TopicPartition(topic, partition)])[0]
                           .offset)
            if time.monotonic() - idle_since > idle_timeout_s:
                raise BulkCatchUpError(
                    f"reading {where}: stuck at offset {position} for {idle_timeout_s:.0f}s; "
                    "is the end beyond the partition's last stable offset, or is the broker "
                    "down?")
    except KafkaException as exc:
        raise BulkCatchUpError(f"reading {where}: {exc}") from exc
    finally:
        consumer.close()


def parse_ranges(ranges: Ranges) -> list[Chunk]:
    """Validate {"topic:N": (start, end)} into one whole-range Chunk per entry, in order.

    Raises:
        ValueError: a malformed partition name or offsets.
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


def group_chunks(settings: Mapping[str, Any], source: Source, key_filter: KeyFilter | None,
                 timings: Any, chunks: Iterable[Chunk]) -> Iterator[tuple[Any, Any]]:
    """Executor side of step 1: read chunks, yield (key, piece) per key and chunk.

    A piece is (order, first offset, rows), rows [(offset, value, timestamp)] in offset
    order; for `changelog` only the chunk's last write, (order, offset, [value]).
    """
    for chunk in chunks:
        began = time.perf_counter()
        rows: dict[bytes | None, list[tuple[int, bytes | None, int]]] = {}
        count = 0
        for msg in read_range(settings, chunk.topic, chunk.partition, chunk.start, chunk.end):
            count += 1
            key = msg.key()
            if key_filter is not None and not key_filter(key):
                continue
            row = (msg.offset(), msg.value(), msg.timestamp()[1])
            if source == "changelog":
                rows[key] = [row]
            elif (known := rows.get(key)) is None:
                rows[key] = [row]
            else:
                known.append(row)
        if timings is not None:
            timings.add({"read": time.perf_counter() - began, "records": count})
        for key, found in rows.items():
            yield key, (chunk.order, found[0][0], found)


def load_job(class_path: str) -> type[Job]:
    """Import "module:Class", a processor.Job subclass.

    Raises:
        ValueError: not importable, or not a Job subclass (callers name the config key).
    """
    module_name, _, name = class_path.partition(":")
    try:
        job_class = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"cannot import job class {class_path!r}: {exc}") from None
    if not (isinstance(job_class, type) and issubclass(job_class, Job)):
        raise ValueError(f"{class_path!r} is not a processor.Job subclass")
    return job_class


# -- the fold (executor side, reduce) ----------------------------------------------------


_dumps = orjson.dumps
_loads = orjson.loads


def _decode(raw: bytes) -> Any:
    """The store's value decoding, with orjson's fast path inlined."""
    try:
        return _loads(raw)
    except orjson.JSONDecodeError:
        return decode_value(raw)


class FoldState(MutableMapping[Any, Any]):
    """A single-key state with the task store's value semantics.

    Values are JSON-encoded on write and decoded on read, as TaskStore does, so a job
    sees exactly what it would see on the consumer path (tuples come back as lists,
    in-place mutation of a read value changes nothing).
    """

    __slots__ = ("raw",)

    def __init__(self) -> None:
        self.raw: dict[Any, bytes] = {}

    def __getitem__(self, key: Any) -> Any:
        return _decode(self.raw[key])

    def get(self, key: Any, default: Any = None) -> Any:
        raw = self.raw.get(key)
        return default if raw is None else _decode(raw)

    def __setitem__(self, key: Any, value: Any) -> None:
        if key.__class__ is not bytes and key.__class__ is not str:
            key = decode_key(encode_key(key))  # the store's normalisation (or TypeError)
        try:
            self.raw[key] = _dumps(value)
        except TypeError:
            self.raw[key] = encode_value(value)

    def __delitem__(self, key: Any) -> None:
        del self.raw[key]

    def __contains__(self, key: object) -> bool:
        return key in self.raw

    def __iter__(self) -> Iterator[Any]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)


def _ordered(pieces: list[Any]) -> list[Any]:
    return sorted(pieces, key=lambda piece: (piece[0], piece[1])) if len(pieces) > 1 else pieces


def _fold_input(job: Job, chunks: Mapping[int, Chunk],
                groups: Mapping[Any, list[Any]]) -> dict[Any, bytes]:
    """Run process() per key in (range order, offset) order; the merged raw state."""
    state_out: dict[Any, bytes] = {}
    for key, pieces in groups.items():
        state = FoldState()
        for order, _, rows in _ordered(pieces):
            chunk = chunks[order]
            for offset, value, timestamp in rows:
                outputs = job.process(Record(key, value, chunk.topic, chunk.partition,
                                             offset, timestamp), state)
                if outputs is not None:
                    for _ in outputs:
                        pass
        for state_key, raw in state.raw.items():
            if state_key in state_out:
                raise BulkCatchUpError(
                    f"state key {state_key!r} written while folding record keys {key!r} and "
                    "another: the job keeps state across keys, which the bulk path cannot "
                    "fold in parallel; use the consumer path")
            state_out[state_key] = raw
    return state_out


def _fold_changelog(groups: Mapping[Any, list[Any]]) -> dict[Any, bytes]:
    """Last write per key wins; a null value deletes."""
    state_out: dict[Any, bytes] = {}
    for raw_key, pieces in groups.items():
        _, _, rows = max(pieces, key=lambda piece: (piece[0], piece[1]))
        key, value = decode_changelog(raw_key, rows[-1][1])
        if value is not None:
            state_out[key] = value
    return state_out


def _fold_and_write(job_class_path: str, source: Source, chunks: Mapping[int, Chunk],
                    offsets: dict[str, int], timings: Any, index: int,
                    pieces: Iterable[tuple[Any, Any]]) -> Iterator[tuple[int, bytes, int]]:
    """Executor side of steps 3-4: fold one reduce partition, return its SST's bytes."""
    groups: dict[Any, list[Any]] = {}
    for key, piece in pieces:
        groups.setdefault(key, []).append(piece)
    began = time.perf_counter()
    if source == "input":
        raw_state = _fold_input(load_job(job_class_path)(), chunks, groups)
    else:
        raw_state = _fold_changelog(groups)
    folded = time.perf_counter()
    mine = offsets if index == 0 else {}
    data = b""
    if raw_state or mine:
        with tempfile.TemporaryDirectory(prefix="baton-sst-") as tmp:
            path = Path(tmp) / f"part-{index:05d}.sst"
            write_sst(path, ((k, decode_value(v)) for k, v in raw_state.items()), mine)
            data = path.read_bytes()
    if timings is not None:
        timings.add({"fold": folded - began, "write": time.perf_counter() - folded})
    if data:
        yield index, data, len(raw_state)


def encode_changelog(key: bytes | str, value: Any) -> tuple[bytes, bytes | None]:
    """The changelog record of a state write: (encoded state key, JSON value or None).

    The key is the store's encoding (type tag + key bytes), so bytes and str state keys
    survive the round trip; value None means the key was deleted.
    """
    return encode_key(key), None if value is None else encode_value(value)


def decode_changelog(raw_key: bytes | None, raw_value: bytes | None
                     ) -> tuple[bytes | str, bytes | None]:
    """(state key, encoded value or None for a delete) of a changelog record."""
    if raw_key is None:
        raise BulkCatchUpError("a changelog record has no key; changelog keys are state keys")
    return decode_key(raw_key), raw_value


class _Timings:
    """Accumulator parameter summing {"name": number} dicts across executor tasks."""

    def zero(self, value: dict[str, float]) -> dict[str, float]:
        return {}

    def addInPlace(self, a: dict[str, float], b: dict[str, float]) -> dict[str, float]:  # noqa: N802
        for name, amount in b.items():
            a[name] = a.get(name, 0.0) + amount
        return a


# -- the driver --------------------------------------------------------------------------


def bulk_catch_up(spark: Any, job_class_path: str, kafka_settings: Mapping[str, Any],
                  ranges: Ranges, source: Source, task: str, *,
                  key_filter: KeyFilter | None = None, chunk_records: int | None = None,
                  sst_files: int | None = None, directory: Path | None = None) -> BulkResult:
    """Build a task's state for `ranges` on Spark, as SST files on the driver.

    Args:
        spark: the SparkSession (see `processor.spark.spark_session`).
        job_class_path: "module:Class" of the job (unused for `changelog`).
        kafka_settings: librdkafka settings of the cluster holding the ranges.
        ranges: {"topic:N": (start, end)}; keys spanning ranges fold in this order.
        source: "input" (replay through process()) or "changelog" (last write wins).
        task: the task's name, for file names and errors.
        key_filter: keep only records whose key passes (a split child's parent range).
        chunk_records: cut ranges into read tasks of this many offsets (default: one
            read task per range; see the module docstring before setting it).
        sst_files: number of SST files, one reduce task each (default from the size).
        directory: where the files go on the driver (default: a new temp directory).

    Returns:
        The files and T2 = {"topic:N": end}; pass it to `ingest_bulk`.

    Raises:
        BulkCatchUpError: the job cannot be loaded, or Spark failed after its retries.
        ValueError: malformed ranges.
    """
    started = time.monotonic()
    whole = parse_ranges(ranges)
    offsets = {f"{c.topic}:{c.partition}": c.end for c in whole}
    if source == "input":
        try:
            load_job(job_class_path)
        except ValueError as exc:
            raise BulkCatchUpError(f"task {task}: {exc}") from None
    sc = spark.sparkContext
    chunks = plan_chunks(ranges, chunk_records)
    total = sum(c.end - c.start for c in whole)
    cores = max(sc.defaultParallelism, 1)  # files in whole waves of reduce tasks
    files = sst_files or cores * max(1, math.ceil(total / (cores * RECORDS_PER_SST)))
    out_dir = directory or Path(tempfile.mkdtemp(prefix=f"baton-bulk-{_safe(task)}-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    result = BulkResult(task, source, out_dir, [], offsets)
    timings = sc.accumulator({}, _Timings())
    try:
        if chunks:
            _run(sc, job_class_path, kafka_settings, source, key_filter, chunks, whole,
                 offsets, files, timings, result)
        else:
            _offsets_only(result)
    except BulkCatchUpError:
        result.cleanup()
        raise
    except Exception as exc:  # noqa: BLE001 - py4j/pyspark raise many types for a job
        result.cleanup()
        raise BulkCatchUpError(
            f"bulk catch-up of task {task} ({_describe(ranges)}, source {source}) failed "
            f"after Spark's task retries: {spark_failure(exc)}") from exc
    result.timings.update({k: float(v) for k, v in timings.value.items() if k != "records"})
    result.records = int(timings.value.get("records", 0))
    result.timings["total"] = time.monotonic() - started
    return result


def _run(sc: Any, job_class_path: str, settings: Mapping[str, Any], source: Source,
         key_filter: KeyFilter | None, chunks: list[Chunk], whole: list[Chunk],
         offsets: dict[str, int], files: int, timings: Any, result: BulkResult) -> None:
    from pyspark import StorageLevel

    began = time.monotonic()
    keyed = sc.parallelize(chunks, len(chunks)).mapPartitions(
        functools.partial(group_chunks, dict(settings), source, key_filter, timings))
    by_order = {c.order: c for c in whole}
    written = keyed.partitionBy(files, key_partition).mapPartitionsWithIndex(
        functools.partial(_fold_and_write, job_class_path, source, by_order, offsets, timings))
    written.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        written.count()  # every reduce task runs in parallel; files wait in executors
        fetched = time.monotonic()
        for index, data, keys in written.toLocalIterator():
            path = result.directory / f"{_safe(result.task)}-{index:05d}.sst"
            path.write_bytes(data)
            result.sst_paths.append(path)
            result.keys += keys
    finally:
        written.unpersist()
    result.timings["spark"] = fetched - began
    result.timings["fetch"] = time.monotonic() - fetched


def _offsets_only(result: BulkResult) -> None:
    """Empty ranges: T2 alone, written on the driver."""
    path = result.directory / f"{_safe(result.task)}-00000.sst"
    write_sst(path, [], result.offsets)
    result.sst_paths.append(path)


def ingest_bulk(store: Any, result: BulkResult) -> None:
    """Ingest every file of `result` into `store` in one atomic step, then remove them.

    Args:
        store: an open, empty `store.TaskStore` for the task.
        result: from `bulk_catch_up`.

    Raises:
        BulkCatchUpError: the store already holds state or offsets (bulk catch-up builds
            a task's state from scratch), or RocksDB refused the files (nothing landed).
    """
    began = time.monotonic()
    try:
        applied = store.applied_offsets()
        if applied or next(iter(store), None) is not None:
            raise BulkCatchUpError(
                f"task store {store.path} already holds state (applied offsets {applied}); "
                f"bulk catch-up of task {result.task} builds state from scratch: catch up "
                "through the consumer, or destroy the store first")
        store.ingest(result.sst_paths, move=True)
    except BulkCatchUpError:
        raise
    except Exception as exc:  # noqa: BLE001 - StoreError and RocksDB's bare errors
        raise BulkCatchUpError(
            f"ingest of {len(result.sst_paths)} SST files into {store.path} failed, nothing "
            f"was applied: {exc}") from exc
    finally:
        result.cleanup()
    result.timings["ingest"] = time.monotonic() - began


def spark_failure(exc: BaseException) -> str:
    """The useful line of a Spark job failure (the Python error, not the JVM trace)."""
    text = str(exc)
    found = re.findall(r"^\S*(?:Error|Exception): .*$", text, flags=re.MULTILINE)
    python = [line for line in found if not line.startswith(("org.", "java.", "py4j."))]
    line = (python or found or [text.strip().splitlines()[0] if text.strip() else repr(exc)])
    return str(line[-1])[:1000]


def _describe(ranges: Ranges) -> str:
    return ", ".join(f"{name} [{lo}, {hi})" for name, (lo, hi) in ranges.items())


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or f"task-{uuid.uuid4().hex[:8]}"
