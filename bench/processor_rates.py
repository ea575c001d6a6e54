"""Processing rates of the task runtime against the raw confluent-kafka consume rate.

One run, one broker (embedded noida-db unless --bootstrap is given), one input topic of
`--partitions` partitions holding `--records` RunningSum records over `--keys` keys:

raw     a read_committed Consumer assign()ed to every partition calls consume(batch)
        until it has read each partition to its end, touching each key and value:
        the ceiling for anything built on confluent-kafka in Python.
warmup  a TaskRuntime holding every task ("Partition N": ["topic:N"]) as a warmup,
        replaying through RunningSum.process() into the task stores; its cap is the
        group's committed offsets, committed beforehand at the end of the topic, so
        it replays everything. Timed from apply() until every replica's lag is 0.
active  a TaskRuntime holding every task active from offset 0 (fresh job, group and
        state dir): exactly-once output to an output topic, a transaction per task per
        poll batch. Timed from apply() until every task's committed offsets reach the end.

Targets (issue 3): warmup >= 0.5 x raw, active >= 0.25 x raw.

    .venv/bin/python bench/processor_rates.py [--records N] [--keys K] [--rounds R]
        [--bootstrap HOST:PORT] [--job MODULE:CLASS] [--json]
"""

from __future__ import annotations

import argparse
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
from orchestrator.wire.config import parse_config
from orchestrator.wire.partitions import format_partition
from orchestrator.wire.protocol import HeartbeatReply, RoleListing
from processor.runtime import TaskRuntime

__all__ = ["main", "measure"]

WARMUP_TARGET = 0.5          # issue 3: warmup replay >= half the raw consume rate
ACTIVE_TARGET = 0.25         # issue 3: exactly-once processing >= a quarter of it
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

    def runtime(self, job: str) -> TaskRuntime:
        raw = {"job": {"name": job, "class": self.job_class,
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
        "enable.partition.eof": False}))
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


def _drive(runtime: TaskRuntime, done: Callable[[], bool], what: str,
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


def run_warmup(bench: Bench, records: int, round_s: float = _POLL_TIMEOUT_S) -> float:
    """Seconds for warmups of every task to replay the topic up to the committed end,
    polling in rounds of `round_s`."""
    job = f"bench-warmup-{uuid.uuid4().hex[:8]}"
    commit_group_at_end(bench, f"baton.{job}")
    runtime = bench.runtime(job)
    model, ends = bench.model(), bench.ends_by_name()

    def done() -> bool:
        return len(runtime.replicas) == len(model) and all(
            r.lag() == 0 and all(r.positions[p] >= ends[p] for p in r.partitions)
            for r in runtime.replicas.values())

    try:
        started = time.perf_counter()
        runtime.apply(HeartbeatReply(alive=True, tasks=model,
                                     assignment=RoleListing(warmup=list(model))))
        _drive(runtime, done, "warmup replay", round_s)
        seconds = time.perf_counter() - started
        applied = sum(r.applied_total for r in runtime.replicas.values())
    finally:
        runtime.close(commit=True)
    if applied != records:
        raise RuntimeError(f"warmups applied {applied} records of {records}")
    return seconds


def run_active(bench: Bench, records: int) -> float:
    """Seconds for active tasks to process the topic exactly once, committed to the end."""
    job = f"bench-active-{uuid.uuid4().hex[:8]}"
    runtime = bench.runtime(job)
    model, ends = bench.model(), bench.ends_by_name()

    def done() -> bool:
        return len(runtime.active) == len(model) and all(
            a.committed.get(p, 0) >= ends[p]
            for a in runtime.active.values() for p in a.partitions)

    try:
        started = time.perf_counter()
        runtime.apply(HeartbeatReply(alive=True, tasks=model,
                                     assignment=RoleListing(active=list(model))))
        _drive(runtime, done, "active processing")
        seconds = time.perf_counter() - started
        processed = sum(a.records_total for a in runtime.active.values())
    finally:
        runtime.close(commit=True)
    if processed != records:
        raise RuntimeError(f"active tasks processed {processed} records of {records}")
    return seconds


# ---- the run ---------------------------------------------------------------------------

def prepared(stack: ExitStack, bootstrap: str | None, partitions: int, records: int,
             keys: int, prefix: str, report: Callable[[str], None]) -> tuple[Bench, Path]:
    """A temporary directory, the embedded broker unless `bootstrap` is given, and the
    input topic written (`records` over `keys`), all closed with `stack`: every bench
    that measures against the same input starts here."""
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
    extra: dict[str, Any] = {}
    broker_pid = None
    if bootstrap is None:
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
            job_class: str = DEFAULT_JOB) -> dict[str, Any]:
    """Best rate (records/s) of each phase over `rounds` rounds on one input topic."""
    embedded = bootstrap is None
    with ExitStack() as stack:
        bench, _ = prepared(stack, bootstrap, partitions, records, keys, "baton-bench-", report)
        bench.job_class = job_class
        best: dict[str, float] = {}
        cpu: dict[str, float] = {}
        phases: dict[str, Callable[[], float]] = {
            "raw": lambda: run_raw(bench, batch),
            "warmup": lambda: run_warmup(bench, records),
            "active": lambda: run_active(bench, records)}
        for r in range(rounds):
            for name, phase in phases.items():
                cpu_before = time.process_time()
                seconds = phase()
                cpu_us = (time.process_time() - cpu_before) / records * 1e6
                report(f"round {r + 1}: {name:<6} {seconds:7.2f}s "
                       f"{records / seconds:>12,.0f} records/s  "
                       f"(this process's CPU: {cpu_us:.2f} us/record)")
                if seconds < best.get(name, float("inf")):
                    best[name], cpu[name] = seconds, cpu_us
    rates = {f"{name}_rate": records / seconds for name, seconds in best.items()}
    rates.update({f"{name}_cpu_us_per_record": us for name, us in cpu.items()})
    warmup_ratio = rates["warmup_rate"] / rates["raw_rate"]
    active_ratio = rates["active_rate"] / rates["raw_rate"]
    return {"records": records, "keys": keys, "partitions": partitions, "rounds": rounds,
            "job": job_class,
            "raw_batch": batch, "embedded": embedded, **rates,
            "warmup_ratio": warmup_ratio, "active_ratio": active_ratio,
            # the same ratios by this process's CPU time per record: steadier than wall time
            # on a shared host (but blind to waits on the broker, and to the broker's CPU)
            "warmup_cpu_ratio": cpu["raw"] / cpu["warmup"],
            "active_cpu_ratio": cpu["raw"] / cpu["active"],
            "warmup_target": WARMUP_TARGET, "active_target": ACTIVE_TARGET,
            "warmup_ok": warmup_ratio >= WARMUP_TARGET,
            "active_ok": active_ratio >= ACTIVE_TARGET}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the three phases; the best time of each counts")
    parser.add_argument("--batch", type=int, default=_RAW_BATCH,
                        help="the raw consumer's consume() batch size")
    parser.add_argument("--bootstrap", help="an existing broker instead of the embedded one")
    parser.add_argument("--job", default=DEFAULT_JOB,
                        help="job.class the runtime runs (records carry integer values)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    if args.records <= 0 or args.keys <= 0 or args.partitions <= 0 or args.rounds <= 0:
        parser.error("--records, --keys, --partitions and --rounds must be positive")

    def report(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    result = measure(args.records, args.keys, args.partitions, args.rounds, args.batch,
                     args.bootstrap, report, args.job)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'raw consume':<14} {result['raw_rate']:>12,.0f} records/s")
    for name, target in (("warmup", WARMUP_TARGET), ("active", ACTIVE_TARGET)):
        ratio = result[f"{name}_ratio"]
        verdict = "ok" if ratio >= target else "MISSED"
        print(f"{name + ' replay' if name == 'warmup' else name + ' (EOS)':<14} "
              f"{result[f'{name}_rate']:>12,.0f} records/s  {name}/raw {ratio:.2f} "
              f"(target >= {target}: {verdict}; by CPU time {result[f'{name}_cpu_ratio']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
