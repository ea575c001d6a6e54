"""The phases the in-process benches share: one input topic on a broker (`Bench`,
`prepared`), and a TaskRuntime driven over it until a phase is done, as a warmup
replaying the input, as active tasks (exactly once, with either catch-up source) or as
warmups applying a changelog.

bench/processor_rates.py, bench/changelog_cost.py, bench/join_catchup.py and
bench/quix_recovery.py measure these phases; a bench runs as a script, so its folder is
on the import path and it imports this module as `_phases`.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.embedded import EMBEDDED_KAFKA_SETTINGS, EmbeddedBroker
from orchestrator.devkit.kafka import KafkaBroker
from orchestrator.wire.changelog import changelog_topic
from orchestrator.wire.config import parse_config
from orchestrator.wire.partitions import format_partition
from orchestrator.wire.protocol import HeartbeatReply, RoleListing
from processor.daemon import ROUND_S
from processor.runtime import TaskRuntime

__all__ = [
    "ADMIN_TIMEOUT_S", "DEFAULT_JOB", "PHASE_TIMEOUT_S", "POLL_TIMEOUT_S", "Bench",
    "commit_group_at_end", "drive", "prepared", "run_active", "run_active_source",
    "run_apply", "run_warmup",
]

# TaskRuntime.poll() timeout: as long as commit_interval_ms, so the active phase commits
# every round, a transaction per poll batch (the daemon's rounds are shorter, ROUND_S of
# processor/daemon/main.py, and commit every commit_interval_ms: bench/changelog_cost.py)
POLL_TIMEOUT_S = 0.1
PHASE_TIMEOUT_S = 1800.0    # a phase taking longer than this is reported as a failure
ADMIN_TIMEOUT_S = 30.0
# the job the task runtime runs: its state is one int per key; --job
# processor.examples:KeyStats keeps a dict per key instead (the state's container path)
DEFAULT_JOB = "processor.examples:RunningSum"


# ---- the input ------------------------------------------------------------------------

class Bench:
    """The broker, the topics and the client settings one run shares."""

    def __init__(self, bootstrap: str, extra: dict[str, Any], partitions: int,
                 state_root: Path, job_class: str = DEFAULT_JOB) -> None:
        self.job_class = job_class
        self.bootstrap = bootstrap
        self.extra = extra
        self.partitions = partitions
        self.state_root = state_root
        run = uuid.uuid4().hex[:8]
        self.topic = f"bench-events-{run}"
        self.output = f"bench-sums-{run}"
        self.ends: dict[int, int] = {}
        self.broker_pid: int | None = None     # the embedded broker's (its autosave)

    def settings(self, **more: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self.extra, **more}

    def create_topics(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topics = [NewTopic(t, self.partitions, 1) for t in (self.topic, self.output)]
        for future in admin.create_topics(topics).values():
            future.result(ADMIN_TIMEOUT_S)

    def produce(self, records: int, keys: int) -> float:
        """Write the input (key k<i % keys>, value 1..9); returns seconds taken."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20,
                             "batch.num.messages": 10_000, "compression.type": "none",
                             "queue.buffering.max.messages": 1_000_000})
        started = time.perf_counter()
        produce, topic = producer.produce, self.topic
        for i in range(records):
            key, value = b"k%d" % (i % keys), b"%d" % (i % 9 + 1)
            while True:
                try:
                    produce(topic, key=key, value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
        if producer.flush(120) != 0:
            raise RuntimeError(f"could not write the input to {topic}: the broker stopped "
                               "acknowledging; see its log")
        seconds = time.perf_counter() - started
        self.ends = self._watermark_ends()
        if sum(self.ends.values()) != records:
            raise RuntimeError(f"{topic} holds {sum(self.ends.values())} records after "
                               f"writing {records}: is another writer using it?")
        return seconds

    def _watermark_ends(self) -> dict[int, int]:
        consumer = Consumer(self.settings(**{"group.id": f"bench-{uuid.uuid4().hex}"}))
        try:
            return {p: int(consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=ADMIN_TIMEOUT_S)[1])
                for p in range(self.partitions)}
        finally:
            consumer.close()

    def model(self) -> dict[str, list[str]]:
        return {f"Partition {p}": [format_partition(self.topic, p)]
                for p in range(self.partitions)}

    def ends_by_name(self) -> dict[str, int]:
        return {format_partition(self.topic, p): end for p, end in self.ends.items()}

    def runtime(self, job: str, job_class: str | None = None) -> TaskRuntime:
        raw = {"job": {"name": job, "class": job_class or self.job_class,
                       "inputs": [self.topic], "output": self.output},
               "kafka": {"bootstrap_servers": self.bootstrap, **self.extra},
               "processor": {"state_dir": str(self.state_root / job)},
               "coordinator": {"token_file": str(self.state_root / "coordinator.token")}}
        return TaskRuntime(parse_config(raw), "bench")



# ---- a TaskRuntime driven over it ------------------------------------------------------

def commit_group_at_end(bench: Bench, group: str) -> None:
    """Commit `group`'s offsets at the topic's end: the warmup's cap (the owner's T1)."""
    consumer = Consumer(bench.settings(**{"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=[TopicPartition(bench.topic, p, end)
                                 for p, end in bench.ends.items()], asynchronous=False)
    finally:
        consumer.close()


def drive(runtime: TaskRuntime, done: Callable[[], bool], what: str,
           round_s: float = POLL_TIMEOUT_S) -> None:
    """poll(round_s) until `done()`, failing on a failed task or after PHASE_TIMEOUT_S."""
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    poll = runtime.poll
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not finish in {PHASE_TIMEOUT_S:.0f}s")
        if runtime.failed:
            raise RuntimeError(f"{what}: tasks failed: {runtime.failed}")
        poll(round_s)


def run_warmup(bench: Bench, records: int, round_s: float = POLL_TIMEOUT_S,
               job_class: str | None = None) -> float:
    """Seconds for warmups of every task to replay the topic up to the committed end,
    polling in rounds of `round_s` (`job_class`: the bench's job unless given)."""
    job = f"bench-warmup-{uuid.uuid4().hex[:8]}"
    commit_group_at_end(bench, f"baton.{job}")
    runtime = bench.runtime(job, job_class)
    model, ends = bench.model(), bench.ends_by_name()

    def done() -> bool:
        return len(runtime.replicas) == len(model) and all(
            r.lag() == 0 and all(r.positions[p] >= ends[p] for p in r.partitions)
            for r in runtime.replicas.values())

    try:
        started = time.perf_counter()
        runtime.apply(HeartbeatReply(alive=True, tasks=model,
                                     assignment=RoleListing(warmup=list(model))))
        drive(runtime, done, "warmup replay", round_s)
        seconds = time.perf_counter() - started
        applied = sum(r.applied_total for r in runtime.replicas.values())
    finally:
        runtime.close(commit=True)
    if applied != records:
        raise RuntimeError(f"warmups applied {applied} records of {records}")
    return seconds


def run_active(bench: Bench, records: int, job_class: str | None = None) -> float:
    """Seconds for active tasks to process the topic exactly once, committed to the end."""
    job = f"bench-active-{uuid.uuid4().hex[:8]}"
    runtime = bench.runtime(job, job_class)
    model, ends = bench.model(), bench.ends_by_name()

    def done() -> bool:
        return len(runtime.active) == len(model) and all(
            a.committed.get(p, 0) >= ends[p]
            for a in runtime.active.values() for p in a.partitions)

    try:
        started = time.perf_counter()
        runtime.apply(HeartbeatReply(alive=True, tasks=model,
                                     assignment=RoleListing(active=list(model))))
        drive(runtime, done, "active processing")
        seconds = time.perf_counter() - started
        processed = sum(a.records_total for a in runtime.active.values())
    finally:
        runtime.close(commit=True)
    if processed != records:
        raise RuntimeError(f"active tasks processed {processed} records of {records}")
    return seconds


def prepared(stack: ExitStack, bootstrap: str | None, partitions: int, records: int,
             keys: int, prefix: str, report: Callable[[str], None],
             broker_kind: str = "embedded") -> tuple[Bench, Path]:
    """A temporary directory, a broker of `broker_kind` ("embedded" or "kafka") unless
    `bootstrap` is given, and the input topic written (`records` over `keys`), all
    closed with `stack`: every bench that measures against the same input starts here."""
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
    extra: dict[str, Any] = {}
    broker_pid = None
    if bootstrap is None and broker_kind == "kafka":
        kafka = KafkaBroker(tmp / "broker")
        bootstrap = kafka.start()
        stack.callback(kafka.close)
        broker_pid = kafka.pid
        report(f"Apache Kafka broker at {bootstrap}")
    elif bootstrap is None:
        broker = EmbeddedBroker(tmp / "broker")
        bootstrap = broker.start()
        stack.callback(broker.close)
        extra = dict(EMBEDDED_KAFKA_SETTINGS)     # the daemons' profile
        broker_pid = broker.pid
    bench = Bench(bootstrap, extra, partitions, tmp / "state")
    bench.broker_pid = broker_pid
    bench.create_topics()
    produce_s = bench.produce(records, keys)
    report(f"wrote {records:,} records over {keys:,} keys to {bench.topic} "
           f"({partitions} partitions) in {produce_s:.1f}s")
    return bench, tmp


# ---- active tasks and warmups under a catch-up source (catch_up.source) ---------------

def _runtime(bench: Bench, job: str, job_class: str, source: str,
             catch_up: dict[str, Any], processor_id: str = "bench") -> TaskRuntime:
    """A runtime of `job`; its stores are `processor_id`'s (a fresh id: empty stores)."""
    raw = {"job": {"name": job, "class": job_class, "inputs": [bench.topic],
                   "output": bench.output},
           "kafka": {"bootstrap_servers": bench.bootstrap, **bench.extra},
           "processor": {"state_dir": str(bench.state_root / job)},
           "coordinator": {"token_file": str(bench.state_root / "coordinator.token")},
           "catch_up": {"source": source, **catch_up}}
    return TaskRuntime(parse_config(raw), processor_id)


def _reply(bench: Bench, role: str) -> HeartbeatReply:
    model = bench.model()
    return HeartbeatReply(alive=True, tasks=model, changelog={t: n for n, t in enumerate(model)},
                          assignment=RoleListing(**{role: list(model)}))


def run_active_source(bench: Bench, records: int, job_class: str, source: str,
                      catch_up: dict[str, Any], loop_s: float = ROUND_S
                      ) -> tuple[float, str, int]:
    """Seconds for active tasks under catch_up.source = `source` (and the broker's
    `catch_up` settings), polled in the daemon's rounds, to process the topic exactly
    once; the job's name and the changelog records written (0 for the input source)."""
    job = f"bench-{source}-{uuid.uuid4().hex[:8]}"
    if source == "changelog":
        admin = AdminClient({"bootstrap.servers": bench.bootstrap})
        topic = changelog_topic(job)
        admin.create_topics([NewTopic(topic, bench.partitions, 1,
                                      config={"cleanup.policy": "compact"})]
                            )[topic].result(ADMIN_TIMEOUT_S)
    runtime = _runtime(bench, job, job_class, source, catch_up)
    ends = bench.ends_by_name()

    def done() -> bool:
        return len(runtime.active) == bench.partitions and all(
            a.committed.get(p, 0) >= ends[p]
            for a in runtime.active.values() for p in a.partitions)

    try:
        started = time.perf_counter()
        runtime.apply(_reply(bench, "active"))
        drive(runtime, done, f"active processing ({source})", loop_s)
        seconds = time.perf_counter() - started
        processed = sum(a.records_total for a in runtime.active.values())
        written = sum(a.changelog.records_total for a in runtime.active.values()
                      if a.changelog is not None)
    finally:
        runtime.close(commit=True)
    if processed != records:
        raise RuntimeError(f"active tasks processed {processed} records of {records}")
    return seconds, job, written


def run_apply(bench: Bench, job: str, job_class: str, catch_up: dict[str, Any],
              loop_s: float = ROUND_S) -> tuple[float, int]:
    """Seconds for warmups of every task to apply `job`'s changelog to its end."""
    # fresh stores each round: the stores' directory is the processor id's, so the
    # warmups apply the whole changelog from wherever catch_up.changelog_read_from
    # starts (the active tasks' own stores are at its end)
    runtime = _runtime(bench, job, job_class, "changelog", catch_up,
                       f"bench-warmup-{uuid.uuid4().hex[:8]}")
    model = bench.model()

    def done() -> bool:
        return len(runtime.replicas) == len(model) and all(
            r.lag() == 0 and r.applied_total > 0 for r in runtime.replicas.values())

    try:
        started = time.perf_counter()
        runtime.apply(_reply(bench, "warmup"))
        drive(runtime, done, "changelog apply", loop_s)
        seconds = time.perf_counter() - started
        applied = sum(r.applied_total for r in runtime.replicas.values())
    finally:
        runtime.close(commit=True)
    return seconds, applied


