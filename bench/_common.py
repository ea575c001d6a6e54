"""What the benches share: keyed input (a preload and steady traffic), CPU seconds read
from /proc, waiting, what Baton's log and metrics say of handoffs, and the report's
tail (JSON, or lines for a human).

A bench runs as a script (`python bench/<name>.py`), so its own folder is on the import
path and it imports this module as `_common`; no bench imports another bench's helpers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from orchestrator.devkit.embedded import (
    EMBEDDED_CATCH_UP_SETTINGS,
    EMBEDDED_CLIENT_SETTINGS,
    EMBEDDED_KAFKA_SETTINGS,
    EMBEDDED_PROCESSOR_SETTINGS,
    EmbeddedBroker,
)
from orchestrator.devkit.kafka import KafkaBroker
from orchestrator.devkit.kafka_cluster import KafkaCluster

__all__ = [
    "BROKERS", "PHASE_LINE", "BenchBroker", "CpuWindow", "Traffic", "broker_name",
    "broker_option",
    "caught_up_records",
    "cpu_seconds", "last_done", "log", "machine_cpu_seconds", "own_cpu_seconds",
    "percentile", "preload", "report", "rss_mb", "start_broker", "stop_on_sigterm",
    "thread_cpu_seconds",
    "wait_broker_quiet", "wait_until",
]

# the brokers a bench runs on: Apache Kafka (orchestrator/devkit/kafka.py), the broker
# users run, on one node or three (orchestrator/devkit/kafka_cluster.py: replication 3,
# min.insync.replicas 2), and the embedded noida-db (orchestrator/devkit/embedded.py)
# of the demo
BROKERS = ("kafka", "kafka3", "embedded")


@dataclass
class BenchBroker:
    """A running broker and the settings Baton runs with on it.

    `client`: librdkafka settings any plain client (a bench's producer or reader) adds;
    `daemon`: config sections ("kafka", "processor", "catch_up") the daemons' config
    file adds. Both are empty on Apache Kafka, where the production defaults hold
    (docs/performance.md, "Embedded-only settings, measured on Apache Kafka").
    `pid`: the broker's process (on the cluster, its first node's).
    """

    kind: str
    bootstrap: str
    pid: int | None
    client: dict[str, Any] = field(default_factory=dict)
    daemon: dict[str, dict[str, Any]] = field(default_factory=dict)
    # a clean stop and a start on the same port and log (bench/soak.py's broker restart)
    restart: Callable[[], None] | None = None

    def settings(self) -> dict[str, Any]:
        """A plain client's librdkafka settings: the bootstrap and `client`."""
        return {"bootstrap.servers": self.bootstrap, **self.client}


def _groups_answer(bootstrap: str) -> bool:
    """Whether a fresh Apache Kafka broker answers offset fetches of a few groups (one
    per partition of its offsets topic, likely): until it has loaded that topic it
    answers COORDINATOR_LOAD_IN_PROGRESS, which a bench's first commit would meet."""
    for n in range(8):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-ready-{n}"})
        try:
            consumer.committed([TopicPartition("bench-ready", 0)], timeout=10)
        finally:
            consumer.close()
    return True


def broker_name(kind: str, bootstrap: str | None) -> str:
    """What a report calls the broker: `kind`, or "external" for --bootstrap."""
    return "external" if bootstrap else kind


def broker_option(parser: argparse.ArgumentParser,
                  kinds: tuple[str, ...] = ("kafka", "embedded")) -> None:
    """`--broker`: which broker the bench starts (default Apache Kafka, one node).
    `kinds`: those it runs on; a bench whose topics are replicated as Baton's are
    (orchestrator.devkit.cluster.create_topics) adds "kafka3": with replication 1, a
    topic on the cluster (min.insync.replicas 2) refuses acks=all writes."""
    parser.add_argument("--broker", choices=kinds, default="kafka",
                        help="the broker to start: Apache Kafka (the broker users run) on "
                             "one node" + (", a three-node Apache Kafka cluster "
                                           "(replication 3, min.insync.replicas 2)"
                                           if "kafka3" in kinds else "")
                             + ", or the embedded noida-db (default: kafka)")


@contextmanager
def start_broker(kind: str) -> Iterator[BenchBroker]:
    """A fresh broker of `kind` (one of BROKERS) in a temporary directory, stopped on
    exit. The cluster's restart is a rolling one."""
    if kind not in BROKERS:
        raise ValueError(f"unknown broker {kind!r}: one of {', '.join(BROKERS)}")
    with tempfile.TemporaryDirectory(prefix=f"baton-bench-{kind}-") as tmp:
        if kind == "kafka":
            with KafkaBroker(Path(tmp) / "broker") as kafka:
                log(f"Apache Kafka broker on {kafka.bootstrap}")
                wait_until("the group coordinator loaded",
                           lambda: _groups_answer(kafka.bootstrap), 120, 0.5)
                yield BenchBroker(kind, kafka.bootstrap, kafka.pid, restart=kafka.restart)
            return
        if kind == "kafka3":
            with KafkaCluster(Path(tmp) / "broker") as cluster:
                log(f"Apache Kafka cluster (3 nodes) on {cluster.bootstrap}")
                wait_until("the group coordinators loaded",
                           lambda: _groups_answer(cluster.bootstrap), 120, 0.5)
                yield BenchBroker(kind, cluster.bootstrap, cluster.pid,
                                  restart=cluster.rolling_restart)
            return
        with EmbeddedBroker(Path(tmp) / "broker") as embedded:
            log(f"embedded broker on {embedded.bootstrap}")
            yield BenchBroker(kind, embedded.bootstrap, embedded.pid,
                              dict(EMBEDDED_CLIENT_SETTINGS),
                              {"kafka": dict(EMBEDDED_KAFKA_SETTINGS),
                               "processor": dict(EMBEDDED_PROCESSOR_SETTINGS),
                               "catch_up": dict(EMBEDDED_CATCH_UP_SETTINGS)},
                              restart=embedded.restart)

# the partition of a key: the benches' inputs spread keys by their crc32, or use one
Partitioner = Callable[[bytes], int]


def preload(bootstrap: str, topic: str, keys: int, partition_of: Partitioner,
            start: int = 0, flush_s: float = 300) -> None:
    """One record of value 1 per key ("key-<i>", i from `start`): the state to build."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1_000_000})
    for i in range(start, start + keys):
        key = f"key-{i}".encode()
        while True:
            try:
                producer.produce(topic, key=key, value=b"1", partition=partition_of(key))
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(flush_s)


class Traffic:
    """Steady keyed traffic over the state's keys, `rate` records a second, on a thread
    of its own, so a new owner has work at once. `hold` pauses it (flushing what it
    sent, as a producer must while its input topic grows); `release` resumes it at the
    same rate, without a burst for the time held."""

    def __init__(self, bootstrap: str, topic: str, keys: int, rate: float,
                 partition_of: Partitioner, settings: dict[str, Any] | None = None) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  **(settings or {})})
        self.topic, self.keys, self.sent = topic, keys, 0
        self._rate, self._partition_of = rate, partition_of
        self._stop, self._hold, self._held = threading.Event(), threading.Event(), \
            threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            if self._hold.is_set():
                self.producer.flush(30)
                self._held.set()
                started = time.monotonic() - self.sent / self._rate
                time.sleep(0.01)
                continue
            self._held.clear()
            while self.sent < int((time.monotonic() - started) * self._rate):
                key = f"key-{self.sent * 7919 % self.keys}".encode()
                self.producer.produce(self.topic, key=key, value=b"1",
                                      partition=self._partition_of(key))
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.005)
        self.producer.flush(30)

    def start(self) -> Traffic:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def hold(self) -> None:
        """Stop sending and return once everything sent so far is flushed."""
        self._held.clear()          # set by an earlier hold, it would say nothing now
        self._hold.set()
        while self._thread.is_alive() and not self._held.wait(0.1):
            pass

    def release(self) -> None:
        self._hold.clear()


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds a process (all its threads) has used so far (Linux
    /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """User + system CPU seconds this process has used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def thread_cpu_seconds(pid: int | None) -> dict[str, float]:
    """CPU seconds of a process's live threads so far, summed by thread name (Linux
    /proc; empty elsewhere): which of the broker's threads, or librdkafka's, spent it."""
    spent: dict[str, float] = {}
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return spent
    for thread in threads:
        try:
            comm = (thread / "comm").read_text().strip()
            fields = (thread / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue                    # the thread ended meanwhile
        ticks = int(fields[11]) + int(fields[12])
        spent[comm] = spent.get(comm, 0.0) + ticks / os.sysconf("SC_CLK_TCK")
    return spent


def machine_cpu_seconds() -> float:
    """CPU seconds every core of the machine has been busy so far (Linux /proc/stat; 0
    elsewhere): set beside the processes', it shows what else ran during a measure."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclass
class CpuWindow:
    """CPU seconds of named processes over a window: `start()`, then `stop()`."""

    pids: dict[str, int | None]
    before: dict[str, float] | None = None

    def start(self) -> CpuWindow:
        self.before = {n: cpu_seconds(p) for n, p in self.pids.items()}
        return self

    def stop(self) -> dict[str, float]:
        before = self.before or {}
        return {n: round(cpu_seconds(p) - before.get(n, 0.0), 2) for n, p in self.pids.items()}


def wait_broker_quiet(pid: int | None, quiet_s: float = 1.5, timeout_s: float = 120.0
                      ) -> float:
    """Wait until the embedded broker's `autosave` thread has spent nothing for `quiet_s`
    and return the seconds waited. After writes it rewrites everything it holds (see
    bench/broker_autosave.py for what a save costs): a save of what was written before a
    measurement must not land in it. Another broker (no such thread): no wait."""
    started = time.monotonic()
    if "autosave" not in thread_cpu_seconds(pid):
        return 0.0
    last, quiet_since = thread_cpu_seconds(pid)["autosave"], time.monotonic()
    while time.monotonic() - quiet_since < quiet_s:
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"the broker's autosave did not settle in {timeout_s:.0f}s")
        time.sleep(0.05)
        now = thread_cpu_seconds(pid).get("autosave", last)
        if now - last >= 0.005:
            quiet_since = time.monotonic()
        last = now
    return time.monotonic() - started


def wait_until(what: str, done: Callable[[], bool], timeout: float,
               every: float = 0.1) -> float:
    """Poll `done` until true; returns the epoch seconds it became true. A KafkaException
    from `done` counts as not yet: a fresh Apache Kafka broker answers NOT_COORDINATOR
    while it loads its offsets and transaction logs.

    Raises:
        TimeoutError: naming `what` (and the last broker error, if any).
    """
    deadline = time.monotonic() + timeout
    error: KafkaException | None = None
    while True:
        try:
            if done():
                return time.time()
        except KafkaException as exc:
            error = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s"
                               + (f" (last broker error: {error})" if error else ""))
        time.sleep(every)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-th percentile (0 for none): with a few moved tasks, p99 is the
    longest pause."""
    if not values:
        return 0.0
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, int(-(-q * len(ranked) // 100)) - 1))]


def stop_on_sigterm() -> None:
    """Make SIGTERM (`timeout`, a CI runner's cancel, `kill`) end the bench as Ctrl-C
    does: its `finally` blocks then stop the daemons and the broker it started, which
    Python's default SIGTERM, an exit on the spot, leaves running."""
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def rss_mb() -> float:
    """This process's resident memory now, in MB (VmRSS, Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def log(text: str) -> None:
    """Progress for the person running the bench (stderr, so --json stays clean)."""
    print(f"# {text}", file=sys.stderr, flush=True)


def report(summary: dict[str, Any], as_json: bool, lines: Iterable[str]) -> None:
    """The report's tail: the summary as one JSON line, or the human lines."""
    if as_json:
        print(json.dumps(summary))
        return
    for line in lines:
        print(line)


# a handoff changing phase, in the coordinator's log: when, task, target, from, to
PHASE_LINE = re.compile(r"^(\S+ \S+) .*task '([^']+)' handoff \S+ -> (\S+): (\S+) -> (\S+)$")


def last_done(coordinator_log: Path, to: str) -> float | None:
    """Epoch seconds of the last handoff to `to` reaching done (the coordinator's log):
    the moment the job became balanced, without a status poll's delay."""
    last: datetime | None = None
    for line in coordinator_log.read_text(errors="replace").splitlines():
        match = PHASE_LINE.match(line)
        if match is not None and match.group(3) == to and match.group(5) == "done":
            last = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
    return None if last is None else last.timestamp()


def caught_up_records(metrics_url: str) -> int:
    """Records a processor applied to its stores without processing them (its warmups'
    and activations' catch-up, either source): baton_catchup_records_total."""
    with urllib.request.urlopen(metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("baton_catchup_records_total{")))
