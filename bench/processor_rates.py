"""Processing rates of the task runtime against the raw confluent-kafka consume rate.

One run, one broker (`--broker embedded`, noida-db, the default; `--broker kafka`, an
Apache Kafka broker from orchestrator/devkit/kafka.py; or an existing one by
--bootstrap), one input topic of `--partitions` partitions holding `--records`
RunningSum records over `--keys` keys, and five phases on it:

raw           a read_committed Consumer (the runtime's fetch settings) assign()ed to
              every partition calls consume(batch) until it has read each partition to
              its end, touching each key and value: the ceiling for anything built on
              confluent-kafka in Python.
floor warmup  the warmup phase below with processor.examples:Discard, a job that
              touches no state and yields nothing: what a replayed record costs
              before any user code (the framework's floor).
floor active  the active phase below with Discard: a transaction per task per poll
              batch, no output.
warmup        a TaskRuntime holding every task ("Partition N": ["topic:N"]) as a warmup,
              replaying through the job (RunningSum, or --job) into the task stores;
              its cap is the group's committed offsets, committed beforehand at the end
              of the topic, so it replays everything. Timed from apply() until every
              replica's lag is 0.
active        a TaskRuntime holding every task active from offset 0 (fresh job, group
              and state dir): exactly-once output to an output topic, a transaction per
              task per poll batch. Timed from apply() until every task's committed
              offsets reach the end.

Each phase is reported as records/s, this process's CPU time per record (us) and its
rate as a ratio to raw, all from the same run (best of --rounds).

Targets: floor warmup <= 1.5 us of CPU a record; warmup >= 0.35 x raw; active
(exactly-once) >= 0.2 x raw.

    .venv/bin/python bench/processor_rates.py [--broker embedded|kafka] [--records N]
        [--keys K] [--rounds R] [--bootstrap HOST:PORT] [--job MODULE:CLASS] [--json]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
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
from orchestrator.wire.config import parse_config
from orchestrator.wire.partitions import format_partition
from orchestrator.wire.protocol import HeartbeatReply, RoleListing
from processor.runtime import TaskRuntime

__all__ = ["main", "measure"]

WARMUP_TARGET = 0.35         # warmup replay of RunningSum >= 0.35 x the raw consume rate
ACTIVE_TARGET = 0.2          # exactly-once processing of RunningSum >= 0.2 x raw
FLOOR_TARGET_US = 1.5        # the framework's own CPU per replayed record (Discard)
FLOOR_JOB = "processor.examples:Discard"
BROKERS = ("embedded", "kafka")
# the phases of one round, in order: (name, job: None for --job, the runtime's role)
PHASES: tuple[tuple[str, str | None, str], ...] = (
    ("floor_warmup", FLOOR_JOB, "warmup"), ("floor_active", FLOOR_JOB, "active"),
    ("warmup", None, "warmup"), ("active", None, "active"))
# the raw consumer fetches as the runtime's consumers do (processor/runtime/consumers.py)
_RAW_FETCH = {"fetch.wait.max.ms": 20, "fetch.queue.backoff.ms": 5}
_RAW_BATCH = 10_000          # raw consumer's consume() batch: larger than this gains nothing
# TaskRuntime.poll() timeout: as long as commit_interval_ms, so the active phase commits
# every round, a transaction per poll batch (the daemon's rounds are shorter, ROUND_S of
# processor/daemon/main.py, and commit every commit_interval_ms: bench/changelog_cost.py)
_POLL_TIMEOUT_S = 0.1
_PHASE_TIMEOUT_S = 1800.0    # a phase taking longer than this is reported as a failure
_ADMIN_TIMEOUT_S = 30.0
# the job the task runtime runs: its state is one int per key; --job
# processor.examples:KeyStats keeps a dict per key instead (the state's container path)
DEFAULT_JOB = "processor.examples:RunningSum"


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
            future.result(_ADMIN_TIMEOUT_S)

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
                TopicPartition(self.topic, p), timeout=_ADMIN_TIMEOUT_S)[1])
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


# ---- the three measurements ------------------------------------------------------------

def run_raw(bench: Bench, batch: int) -> float:
    """Seconds for a plain read_committed consumer to read the whole topic."""
    consumer = Consumer(bench.settings(**{
        "group.id": f"bench-raw-{uuid.uuid4().hex}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "auto.offset.reset": "earliest",
        "enable.partition.eof": False, **_RAW_FETCH}))
    try:
        remaining = {p: end for p, end in bench.ends.items() if end > 0}
        consume = consumer.consume
        started = time.perf_counter()
        consumer.assign([TopicPartition(bench.topic, p, 0) for p in bench.ends])
        deadline = time.monotonic() + _PHASE_TIMEOUT_S
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"raw consumer: partitions {sorted(remaining)} unread")
            for msg in consume(batch, _POLL_TIMEOUT_S):
                if msg.error():
                    continue
                msg.key()
                msg.value()
                p = msg.partition()
                if msg.offset() + 1 >= remaining.get(p, -1) >= 0:
                    del remaining[p]
        return time.perf_counter() - started
    finally:
        consumer.close()


def commit_group_at_end(bench: Bench, group: str) -> None:
    """Commit `group`'s offsets at the topic's end: the warmup's cap (the owner's T1)."""
    consumer = Consumer(bench.settings(**{"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=[TopicPartition(bench.topic, p, end)
                                 for p, end in bench.ends.items()], asynchronous=False)
    finally:
        consumer.close()


def drive(runtime: TaskRuntime, done: Callable[[], bool], what: str,
           round_s: float = _POLL_TIMEOUT_S) -> None:
    """poll(round_s) until `done()`, failing on a failed task or after _PHASE_TIMEOUT_S."""
    deadline = time.monotonic() + _PHASE_TIMEOUT_S
    poll = runtime.poll
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not finish in {_PHASE_TIMEOUT_S:.0f}s")
        if runtime.failed:
            raise RuntimeError(f"{what}: tasks failed: {runtime.failed}")
        poll(round_s)


def run_warmup(bench: Bench, records: int, round_s: float = _POLL_TIMEOUT_S,
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


# ---- the run ---------------------------------------------------------------------------

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


def measure(records: int, keys: int, partitions: int, rounds: int, batch: int,
            bootstrap: str | None, report: Callable[[str], None],
            job_class: str = DEFAULT_JOB, broker_kind: str = "embedded") -> dict[str, Any]:
    """Best rate (records/s) of each phase over `rounds` rounds on one input topic, with
    this process's CPU per record in that best round and the ratio to raw's best."""
    with ExitStack() as stack:
        bench, _ = prepared(stack, bootstrap, partitions, records, keys, "baton-bench-",
                            report, broker_kind)
        bench.job_class = job_class
        best: dict[str, float] = {}
        cpu: dict[str, float] = {}
        phases: dict[str, Callable[[], float]] = {"raw": lambda: run_raw(bench, batch)}
        for name, job, role in PHASES:
            phases[name] = functools.partial(
                run_warmup if role == "warmup" else run_active,
                bench, records, job_class=job)
        for r in range(rounds):
            for name, phase in phases.items():
                cpu_before = time.process_time()
                seconds = phase()
                cpu_us = (time.process_time() - cpu_before) / records * 1e6
                report(f"round {r + 1}: {name:<12} {seconds:7.2f}s "
                       f"{records / seconds:>12,.0f} records/s  "
                       f"(this process's CPU: {cpu_us:.2f} us/record)")
                if seconds < best.get(name, float("inf")):
                    best[name], cpu[name] = seconds, cpu_us
    rates = {f"{name}_rate": records / seconds for name, seconds in best.items()}
    rates.update({f"{name}_cpu_us_per_record": us for name, us in cpu.items()})
    ratios = {f"{name}_ratio": rates[f"{name}_rate"] / rates["raw_rate"] for name in best
              if name != "raw"}
    # the same ratios by this process's CPU time per record: steadier than wall time
    # on a shared host (but blind to waits on the broker, and to the broker's CPU)
    ratios.update({f"{name}_cpu_ratio": cpu["raw"] / cpu[name] for name in best
                   if name != "raw"})
    return {"records": records, "keys": keys, "partitions": partitions, "rounds": rounds,
            "job": job_class, "broker": "bootstrap" if bootstrap else broker_kind,
            "raw_batch": batch, "embedded": bootstrap is None and broker_kind == "embedded",
            **rates, **ratios,
            "floor_target_us": FLOOR_TARGET_US,
            "warmup_target": WARMUP_TARGET, "active_target": ACTIVE_TARGET,
            "floor_ok": cpu["floor_warmup"] <= FLOOR_TARGET_US,
            "warmup_ok": ratios["warmup_ratio"] >= WARMUP_TARGET,
            "active_ok": ratios["active_ratio"] >= ACTIVE_TARGET}


_VERDICT = {True: "ok", False: "MISSED"}
_LABELS = {"raw": "raw consume", "floor_warmup": "floor warmup", "floor_active": "floor active",
           "warmup": "warmup replay", "active": "active (EOS)"}


def print_table(result: dict[str, Any]) -> None:
    """One line a phase: rate, CPU per record, ratio to raw; then the targets."""
    print(f"broker: {result['broker']}; job: {result['job']}; {result['records']:,} records, "
          f"{result['keys']:,} keys, {result['partitions']} partitions, best of "
          f"{result['rounds']}")
    print(f"{'phase':<14} {'records/s':>12} {'CPU us/rec':>11} {'x raw':>6} {'x raw (CPU)':>12}")
    for name, label in _LABELS.items():
        ratio = 1.0 if name == "raw" else result[f"{name}_ratio"]
        cpu_ratio = 1.0 if name == "raw" else result[f"{name}_cpu_ratio"]
        print(f"{label:<14} {result[f'{name}_rate']:>12,.0f} "
              f"{result[f'{name}_cpu_us_per_record']:>11.2f} {ratio:>6.2f} {cpu_ratio:>12.2f}")
    print(f"targets: floor warmup <= {FLOOR_TARGET_US} us/record: "
          f"{result['floor_warmup_cpu_us_per_record']:.2f} {_VERDICT[result['floor_ok']]}; "
          f"warmup >= {WARMUP_TARGET} x raw: {result['warmup_ratio']:.2f} "
          f"{_VERDICT[result['warmup_ok']]}; active >= {ACTIVE_TARGET} x raw: "
          f"{result['active_ratio']:.2f} {_VERDICT[result['active_ok']]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the five phases; the best time of each counts")
    parser.add_argument("--batch", type=int, default=_RAW_BATCH,
                        help="the raw consumer's consume() batch size")
    parser.add_argument("--broker", choices=BROKERS, default="embedded",
                        help="the broker the run starts (ignored with --bootstrap)")
    parser.add_argument("--bootstrap", help="an existing broker instead of starting one")
    parser.add_argument("--job", default=DEFAULT_JOB,
                        help="job.class the runtime runs (records carry integer values)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    if args.records <= 0 or args.keys <= 0 or args.partitions <= 0 or args.rounds <= 0:
        parser.error("--records, --keys, --partitions and --rounds must be positive")

    def report(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    result = measure(args.records, args.keys, args.partitions, args.rounds, args.batch,
                     args.bootstrap, report, args.job, args.broker)
    if args.json:
        print(json.dumps(result))
        return 0
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
