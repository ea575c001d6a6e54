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
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from _phases import (
    DEFAULT_JOB,
    PHASE_TIMEOUT_S,
    POLL_TIMEOUT_S,
    Bench,
    prepared,
    run_active,
    run_warmup,
)
from confluent_kafka import Consumer, TopicPartition

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


# ---- the raw consume (the runtime's phases: bench/_phases.py) -------------------------

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
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"raw consumer: partitions {sorted(remaining)} unread")
            for msg in consume(batch, POLL_TIMEOUT_S):
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


# ---- the run ---------------------------------------------------------------------------

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
    parser.add_argument("--broker", choices=("kafka", "embedded"), default="embedded",
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
