"""Shared fixtures: one broker per test session (Apache Kafka, the embedded noida-db, or
the broker in BATON_TEST_BOOTSTRAP), topic factories, and configs pointing at it."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.embedded import (
    EMBEDDED_CATCH_UP_SETTINGS,
    EMBEDDED_CLIENT_SETTINGS,
    EMBEDDED_KAFKA_SETTINGS,
    EMBEDDED_PROCESSOR_SETTINGS,
    EmbeddedBroker,
)
from orchestrator.devkit.kafka import KafkaBroker

# which local broker the tests start: Apache Kafka (the default) or the embedded noida-db
_BROKER_KINDS = ("kafka", "embedded")


class Broker:
    """What tests know about the broker: where it is, which client settings it needs, and
    the local broker the tests started (None for one given in BATON_TEST_BOOTSTRAP).
    `embedded` is set for the embedded broker, whose profile the daemons then get."""

    def __init__(self, bootstrap: str, extra: dict[str, Any],
                 local: EmbeddedBroker | KafkaBroker | None = None) -> None:
        self.bootstrap = bootstrap
        self.extra = extra
        self.local = local
        self.embedded = local if isinstance(local, EmbeddedBroker) else None

    def settings(self, **more: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self.extra, **more}

    def kafka_table(self) -> dict[str, Any]:
        """The [kafka] table of a Baton config for this broker (the embedded one's: its
        daemons' profile, as the demo's)."""
        daemons = EMBEDDED_KAFKA_SETTINGS if self.embedded is not None else {}
        return {"bootstrap_servers": self.bootstrap, **self.extra, **daemons}

    def catch_up_table(self) -> dict[str, Any]:
        """The [catch_up] settings this broker needs (the embedded one's quirks)."""
        return dict(EMBEDDED_CATCH_UP_SETTINGS) if self.embedded is not None else {}

    def processor_table(self) -> dict[str, Any]:
        """The [processor] settings this broker needs (the embedded one's idle back-off)."""
        return dict(EMBEDDED_PROCESSOR_SETTINGS) if self.embedded is not None else {}

    def create_topic(self, name: str, partitions: int) -> str:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(30)
        # Apache Kafka's brokers learn a new topic from the metadata log a moment after
        # CreateTopics answers: wait until every partition has a leader
        wait_for(lambda: _has_leaders(admin, name, partitions), 30, f"leaders of {name}")
        return name

    def producer(self, **more: Any) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, **more})

    def read_all(self, topic: str, timeout: float = 60.0,
                 committed_only: bool = True) -> list[Any]:
        """Every message of `topic` up to its current end, in partition-offset order."""
        consumer = Consumer(self.settings(**{
            "group.id": f"reader-{uuid.uuid4()}", "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
            "auto.offset.reset": "earliest"}))
        try:
            return _drain(consumer, topic, timeout)
        finally:
            consumer.close()


def _has_leaders(admin: AdminClient, topic: str, partitions: int) -> bool:
    meta = admin.list_topics(topic, timeout=10).topics.get(topic)
    return (meta is not None and meta.error is None and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values()))


def _drain(consumer: Consumer, topic: str, timeout: float) -> list[Any]:
    import time

    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    ends = {}
    for p in meta.partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        ends[p] = high
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    out: list[Any] = []
    done = {p for p, high in ends.items() if high == 0}
    deadline = time.monotonic() + timeout
    positions: dict[int, int] = {}
    while len(done) < len(ends):
        if time.monotonic() > deadline:
            # a read_committed reader stops at the first open transaction; a partial
            # read would look like lost records to the oracle, so say so instead
            behind = {p: f"{positions.get(p)} of {ends[p]}" for p in ends if p not in done}
            raise AssertionError(f"{topic} not read to its end within {timeout:.0f} s "
                                 f"(partition: position of end {behind}); "
                                 "an open transaction holds its last stable offset")
        for msg in consumer.consume(10000, 0.5):
            if msg.error():
                continue
            out.append(msg)
        for p, high in ends.items():
            pos = consumer.position([TopicPartition(topic, p)])[0].offset
            positions[p] = pos
            if pos >= high:
                done.add(p)
    out.sort(key=lambda m: (m.partition(), m.offset()))
    return out


def broker_kind() -> str:
    """The local broker kind BATON_TEST_BROKER picks (kafka unless told)."""
    kind = os.environ.get("BATON_TEST_BROKER", "kafka") or "kafka"
    if kind not in _BROKER_KINDS:
        raise pytest.UsageError(f"BATON_TEST_BROKER={kind!r}: expected one of "
                                f"{', '.join(_BROKER_KINDS)}")
    return kind


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `kafka` test what only Apache Kafka does: the embedded broker has
    none of it, so under BATON_TEST_BROKER=embedded they are deselected (not skipped)."""
    if broker_kind() != "embedded":
        return
    dropped = [item for item in items if item.get_closest_marker("kafka") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.get_closest_marker("kafka") is None]


@contextmanager
def _local_broker(directory: Path) -> Iterator[Broker]:
    """A started broker of the selected kind in `directory`, stopped on exit."""
    if broker_kind() == "embedded":
        embedded = EmbeddedBroker(directory)
        embedded.start()
        try:
            yield Broker(embedded.bootstrap, dict(EMBEDDED_CLIENT_SETTINGS), embedded)
        finally:
            embedded.close()
        return
    kafka = KafkaBroker(directory)
    kafka.start()
    try:
        yield Broker(kafka.bootstrap, {}, kafka)
    finally:
        kafka.close()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """The session's broker: BATON_TEST_BOOTSTRAP's, else a local one of BATON_TEST_BROKER's
    kind."""
    given = os.environ.get("BATON_TEST_BOOTSTRAP")
    if given:
        yield Broker(given, {}, None)
        return
    with _local_broker(tmp_path_factory.mktemp("broker")) as local:
        yield local


@pytest.fixture
def restartable_broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker of the test's own (of BATON_TEST_BROKER's kind), which it may restart: a
    broker given in BATON_TEST_BOOTSTRAP is shared and not ours to stop."""
    with _local_broker(tmp_path / "broker") as local:
        yield local


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Unique names, so tests sharing one broker never see each other's topics."""
    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"
    return make


@pytest.fixture
def job_config(broker: Broker, tmp_path: Path, unique: Callable[[str], str]
               ) -> Callable[..., dict[str, Any]]:
    """A factory of raw config mappings for a fresh job on the shared broker."""
    def make(partitions: int = 4, **sections: dict[str, Any]) -> dict[str, Any]:
        name = unique("job")
        inputs = broker.create_topic(unique("events"), partitions)
        output = broker.create_topic(unique("sums"), partitions)
        raw: dict[str, Any] = {
            # expansion_grace_ms 0: the tests' producers see a new partition count before
            # they write again (tests of the grace set their own)
            "job": {"name": name, "class": "processor.examples:RunningSum",
                    "inputs": [inputs], "output": output, "expansion_grace_ms": 0},
            "kafka": broker.kafka_table(),
            "processor": {"state_dir": str(tmp_path / "state"), **broker.processor_table()},
            "coordinator": {"token_file": str(tmp_path / "coordinator.token")},
            "catch_up": broker.catch_up_table(),
        }
        for section, values in sections.items():
            raw.setdefault(section, {}).update(values)
        return raw
    return make


class Feeder:
    """A steady keyed producer on its own thread: value 1..9, keys k0..k<keys-1> in turn
    (or the given key list, which `use_keys` may change under way).

    With `transactional_id` it writes like an exactly-once job upstream: a transaction
    every `batch` records, so commit markers sit between the records.
    """

    def __init__(self, broker: Broker, topic: str, keys: int | Sequence[bytes] = 50,
                 rate: float = 2000.0, transactional_id: str | None = None, batch: int = 50,
                 **settings: Any) -> None:
        import threading

        self.broker, self.topic, self.rate = broker, topic, rate
        self.keys: list[bytes] = ([f"k{i}".encode() for i in range(keys)]
                                  if isinstance(keys, int) else list(keys))
        self.transactional_id, self.batch = transactional_id, batch
        self.settings = settings
        self.sent = 0
        self.failed = 0                 # deliveries the broker never acknowledged
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._paused = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def use_keys(self, keys: Sequence[bytes]) -> None:
        self.keys = list(keys)

    def _producer(self) -> Any:
        # idempotent: a send retried across a broker restart is not written twice
        extra: dict[str, Any] = {"enable.idempotence": True, **self.settings}
        if self.transactional_id is not None:
            extra["transactional.id"] = self.transactional_id
        producer = self.broker.producer(**extra)
        if self.transactional_id is not None:
            producer.init_transactions(30)
            producer.begin_transaction()
        return producer

    def _flush(self, producer: Any) -> None:
        if self.transactional_id is None:
            assert producer.flush(30) == 0
            return
        producer.commit_transaction(30)
        producer.begin_transaction()

    def _run(self) -> None:
        import time

        producer = self._producer()
        started = time.monotonic()
        while not self._stop.is_set():
            if not self._running.is_set():
                self._flush(producer)
                self._paused.set()
                self._running.wait(0.1)
                started = time.monotonic() - self.sent / self.rate
                continue
            self._paused.clear()
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                i = self.sent
                keys = self.keys
                producer.produce(self.topic, key=keys[i % len(keys)],
                                 value=str(i % 9 + 1).encode(), on_delivery=self._delivered)
                self.sent += 1
                if self.transactional_id is not None and self.sent % self.batch == 0:
                    self._flush(producer)
            producer.poll(0)
            time.sleep(0.01)
        self._flush(producer)
        if self.transactional_id is not None:
            producer.abort_transaction(30)  # the empty one _flush began

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1

    def pause(self) -> None:
        """Stop producing; returns once everything sent so far is acknowledged."""
        self._paused.clear()
        self._running.clear()
        assert self._paused.wait(60), "the feeder did not pause"

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> int:
        """Stop; returns how many records the broker acknowledged (a delivery that
        failed after its retries is not on the topic, so the oracle must not expect it)."""
        self._running.set()
        self._stop.set()
        self._thread.join(60)
        return self.sent - self.failed


def oracle_check(broker: Broker, config: Any) -> Any:
    """Read input and output topics and run the running-sum oracle."""
    from orchestrator.wire.barrier import input_records
    from processor.oracle import check_running_sums
    from tests.oracle_report import Checked, report

    inputs = [m for topic in config.job.inputs for m in input_records(broker.read_all(topic))]
    outputs = broker.read_all(config.job.output)
    result = check_running_sums([(m.key(), m.value()) for m in inputs],
                                [(m.key(), m.value()) for m in outputs])
    return Checked(result, "" if result.ok else report(inputs, outputs))


def identified_check(broker: Broker, config: Any) -> Any:
    """Read input and output topics and run IdentifiedSum's oracle (one id per key)."""
    from orchestrator.wire.barrier import input_records
    from processor.oracle import check_identified_sums

    inputs = [(m.key(), m.value()) for topic in config.job.inputs
              for m in input_records(broker.read_all(topic))]
    outputs = [(m.key(), m.value()) for m in broker.read_all(config.job.output)]
    return check_identified_sums(inputs, outputs)


def wait_for(condition: Callable[[], bool], timeout: float, what: str,
             step: Callable[[], object] | None = None) -> None:
    """Run `step` (or sleep) until `condition` holds; fail naming `what` after `timeout`."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        if step is not None:
            step()
        else:
            time.sleep(0.05)


def memtable_bloom_ratio(store_dir: Path) -> float:
    """The memtable Bloom filter ratio a RocksDB store has in force: its newest OPTIONS
    file (RocksDB writes one at open and at every SetOptions)."""
    newest = max(store_dir.glob("OPTIONS-*"), key=lambda f: int(f.name.split("-")[1]))
    return float(next(line.split("=")[1] for line in newest.read_text().splitlines()
                      if line.strip().startswith("memtable_prefix_bloom_size_ratio=")))


# ---- daemons as subprocesses (coordinator, processors) ----------------------------------


class Daemon:
    """One `baton ...` daemon subprocess with its own log file; stopped by its test.
    `env` adds to (or overrides) the environment, BATON_LOG_LEVEL=INFO included."""

    def __init__(self, name: str, args: list[str], log: Path,
                 env: dict[str, str] | None = None) -> None:
        import subprocess
        import sys

        self.name, self.args, self.log_path = name, args, log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.cli", *args], stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                cwd=Path(__file__).resolve().parents[1],
                env={**os.environ, "BATON_LOG_LEVEL": "INFO", **(env or {})})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (graceful), then wait; SIGKILL if it does not exit in time."""
        import signal
        import subprocess

        if self.running():
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, like a crashed host."""
        if self.running():
            self.proc.kill()
        self.proc.wait(30)


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """A factory: `daemons(name, "processor", "-c", file, "--id", "p1")` starts one
    (`env={...}`: extra environment variables).

    Every daemon still running at teardown is killed (by its PID), so a failing test
    never leaves processes behind; the last lines of each log are printed on failure.
    """
    started: list[Daemon] = []

    def start(name: str, *args: str, env: dict[str, str] | None = None) -> Daemon:
        daemon = Daemon(name, [str(a) for a in args], tmp_path / f"{name}.log", env)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()
        # one that died on its own shows its whole traceback, not only its end
        died = daemon.proc.returncode not in (0, -signal.SIGKILL, -signal.SIGTERM)
        tail = daemon.log().splitlines()[-80 if died else -15:]
        print(f"---- {daemon.name} (exit {daemon.proc.returncode}) ----", *tail, sep="\n")


@pytest.fixture
def coordinated(job_config: Callable[..., dict[str, Any]], tmp_path: Path
                ) -> Callable[..., tuple[Any, Path]]:
    """A factory: a job config with its own coordinator port and short, test-friendly
    intervals, written to a TOML file. Returns (Config, path)."""
    from orchestrator.devkit.embedded import free_port
    from orchestrator.wire.config import dump_config, load_config

    def make(partitions: int = 4, **sections: dict[str, Any]) -> tuple[Any, Path]:
        port = free_port()
        defaults: dict[str, dict[str, Any]] = {
            "coordinator": {"listen": f"127.0.0.1:{port}", "url": f"http://127.0.0.1:{port}",
                            "release_timeout_ms": 5000, "monitor_interval_ms": 500,
                            "processor_timeout_ms": 4000, "takeover_ms": 2000},
            "processor": {"heartbeat_interval_ms": 200, "coordinator_grace_ms": 20000,
                          "commit_interval_ms": 100},
            "catch_up": {"acceptable_lag": 200, "max_warmups": 2},
        }
        for section, values in sections.items():
            defaults.setdefault(section, {}).update(values)
        raw = job_config(partitions, **defaults)
        path = tmp_path / f"{raw['job']['name']}.toml"
        path.write_text(dump_config(raw))
        return load_config(path), path
    return make


def coordinator_client(config: Any, retry: dict[str, Any] | None = None) -> Any:
    """A CoordinatorClient with the token from the config's token file (and its TLS
    settings, as the CLI uses them)."""
    from orchestrator.wire.client import CoordinatorClient
    from orchestrator.wire.token import read_token

    return CoordinatorClient.for_config(config, read_token(config.token_file), retry)


# how long the tests' client retries a call no leader answers: a leader that could not
# write its stream within three quarters of the tests' short takeover_ms (2 s) answers
# 503 until its next write succeeds, which a loaded machine can delay by seconds; an
# operator's `baton` command rides that out the same way (orchestrator/wire/client.py)
PATIENT_CLIENT_S = 20.0


def wait_for_coordinator(config: Any, daemon: Daemon, timeout: float = 60.0) -> Any:
    """Wait until the coordinator answers /status; returns a client that retries a call
    for up to PATIENT_CLIENT_S while no leader answers."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not daemon.running():
            raise AssertionError(f"coordinator exited with {daemon.proc.returncode}:\n"
                                 f"{daemon.log()[-3000:]}")
        if config.token_file.exists():
            from tenacity import stop_after_attempt, stop_after_delay, wait_fixed

            client = coordinator_client(config, {"stop": stop_after_attempt(1)})
            try:
                client.status()
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.1)
                continue
            finally:
                client.close()
            return coordinator_client(config, {"stop": stop_after_delay(PATIENT_CLIENT_S),
                                               "wait": wait_fixed(0.2)})
        time.sleep(0.1)
    raise AssertionError(f"coordinator not up in {timeout:.0f}s:\n{daemon.log()[-3000:]}")


# (case, records in, records out, lost, duplicated, wrong) rows of the fault suite
FAULT_RESULTS: list[tuple[str, int, int, int, int, int]] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    import sys

    # test modules import this file as `tests.conftest`, pytest loads it as `conftest`
    rows = {id(m.FAULT_RESULTS): m.FAULT_RESULTS for m in
            (sys.modules.get("conftest"), sys.modules.get("tests.conftest"))
            if m is not None and hasattr(m, "FAULT_RESULTS")}
    results = [row for found in rows.values() for row in found]
    if not results:
        return
    write = terminalreporter.write_line
    write("")
    write(f"{'fault case':<50} {'in':>7} {'out':>7} {'lost':>5} {'dup':>5} {'wrong':>5}")
    for case, rin, rout, lost, dup, wrong in results:
        write(f"{case:<50} {rin:>7} {rout:>7} {lost:>5} {dup:>5} {wrong:>5}")
