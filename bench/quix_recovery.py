"""quixstreams' changelog recovery rate, beside a raw consume of the same changelog.

One run, one broker (`--broker`: Apache Kafka by default, or the embedded noida-db;
--bootstrap: an existing one, with Kafka's profile), one input topic of
`--partitions` partitions holding `--records` records over `--keys` keys (the input of
bench/processor_rates.py: key k<i % keys>, value 1..9). quixstreams runs in its own
interpreter (`--quix-python`, a venv with `pip install quixstreams`; never the
project's), as subprocesses of this script:

process    a quixstreams Application keeping a running sum per key (`state.set`) reads
           the whole input once, which writes its changelog topic; then it stops.
recover    the app's state dir is deleted and the app started again (same consumer
           group, so nothing is left to process): it restores its RocksDB state from
           the changelog. Timed inside the app from RecoveryManager.do_recovery()
           entry ("Beginning recovery check...") to its return ("Recovery process
           complete!"), which includes quixstreams' final idle poll(1): the loop
           checks for completion only when a poll returns nothing. Also reported: the
           rate up to the last changelog record applied, which excludes that tail.
raw        a plain confluent-kafka consumer (this interpreter; read_committed, as
           quixstreams' consumer is by librdkafka's default; batches of 10,000) reads
           the same changelog partitions from offset 0 to their end: the limit the
           restore is measured against in the same round.

recover and raw are repeated `--rounds` times (best of each); process runs once.

    .venv/bin/python bench/quix_recovery.py [--records N] [--keys K] [--partitions P]
        [--rounds R] [--guarantee at-least-once|exactly-once]
        [--quix-python /tmp/quixvenv/bin/python] [--broker kafka|embedded]
        [--bootstrap HOST:PORT] [--json]

The processing rate of the first phase (`process_rate`; with --guarantee exactly-once,
quixstreams' exactly-once rate) is what bench/processor_rates.py's active phase is
set beside.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _phases import Bench

# Only the standard library at module level: the same file runs as the quixstreams
# child under --quix-python, where neither Baton nor its dependencies are installed.

__all__ = ["main", "measure"]

_QUIX_PYTHON = "/tmp/quixvenv/bin/python"
_CHILD = "child"                  # argv[1] of the quixstreams subprocesses
_STORE = "default"
_CHILD_TIMEOUT_S = 1800.0
_IDLE_STOP_S = 60.0               # a child stops when its input goes quiet this long
_ADMIN_TIMEOUT_S = 30.0
_RAW_BATCH = 10_000


# ---- the quixstreams side (runs under --quix-python) -----------------------------------

def _quix_app(args: argparse.Namespace) -> Any:
    """The Application and its one stateful dataframe: a running sum per key."""
    from quixstreams import Application, State

    extra = json.loads(args.extra)
    app = Application(broker_address=args.bootstrap, consumer_group=args.group,
                      auto_offset_reset="earliest", state_dir=args.state_dir,
                      processing_guarantee=args.guarantee, consumer_extra_config=extra,
                      producer_extra_config=extra, loglevel="INFO")

    def running_sum(value: int, state: State) -> int:
        total: int = state.get("sum", 0) + value
        state.set("sum", total)
        return total

    sdf = app.dataframe(app.topic(args.topic, value_deserializer="json"))
    sdf.apply(running_sum, stateful=True)
    return app


def _child_process(args: argparse.Namespace) -> dict[str, Any]:
    """Read the whole input once (the changelog gets written on each checkpoint)."""
    app = _quix_app(args)
    started = time.perf_counter()
    app.run(count=args.records, timeout=_IDLE_STOP_S, collect=False)
    return {"seconds": time.perf_counter() - started}


def _child_recover(args: argparse.Namespace) -> dict[str, Any]:
    """Start on an empty state dir; time RecoveryManager.do_recovery; stop once it is done.

    The hooks wrap quixstreams' own methods: do_recovery (the whole restore, as its
    "Beginning recovery check..." / "Recovery process complete!" log lines bracket it)
    and RecoveryPartition.recover_from_changelog_message (one call per changelog record,
    for the count and the time of the last one; the wrapper adds well under 1% here).
    """
    from quixstreams.state.recovery import RecoveryManager, RecoveryPartition

    shutil.rmtree(args.state_dir, ignore_errors=True)
    app = _quix_app(args)
    marks: dict[str, Any] = {"applied": 0, "last": None, "start": None, "end": None,
                             "partitions": []}
    do_recovery = RecoveryManager.do_recovery
    recover_one = RecoveryPartition.recover_from_changelog_message

    def timed_recovery(manager: RecoveryManager) -> None:
        parts = [rp for by_store in manager.partitions.values() for rp in by_store.values()]
        marks["partitions"] += [[rp.changelog_name, rp.partition_num, rp.changelog_highwater]
                                for rp in parts]
        if marks["start"] is None:
            marks["start"] = time.perf_counter()
        do_recovery(manager)
        marks["end"] = time.perf_counter()
        if not manager.has_assignments:
            app.stop()

    def counted(rp: RecoveryPartition, changelog_message: Any) -> None:
        recover_one(rp, changelog_message)
        marks["applied"] += 1
        marks["last"] = time.perf_counter()

    RecoveryManager.do_recovery = timed_recovery                         # type: ignore[method-assign]
    RecoveryPartition.recover_from_changelog_message = counted           # type: ignore[method-assign]
    started = time.perf_counter()
    app.run(timeout=_IDLE_STOP_S, collect=False)
    if marks["start"] is None or marks["end"] is None:
        raise RuntimeError("quixstreams ran no recovery: is its changelog empty?")
    return {"seconds": marks["end"] - marks["start"],
            "to_last_record": (marks["last"] or marks["end"]) - marks["start"],
            "startup": marks["start"] - started, "applied": marks["applied"],
            "partitions": marks["partitions"]}


def _child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="quix_recovery.py child")
    parser.add_argument("phase", choices=["process", "recover"])
    for name in ("--bootstrap", "--topic", "--group", "--state-dir", "--guarantee",
                 "--extra"):
        parser.add_argument(name, required=True)
    parser.add_argument("--records", type=int, default=0)
    args = parser.parse_args(argv)
    result = (_child_process if args.phase == "process" else _child_recover)(args)
    import quixstreams

    result["quixstreams"] = quixstreams.__version__
    print(json.dumps(result), flush=True)
    return 0


# ---- the Baton side (runs in the project venv) -----------------------------------------

class QuixRun:
    """How to start the quixstreams children of one run."""

    def __init__(self, python: str, bench: Bench, guarantee: str, tmp: Path) -> None:
        self.python = python
        self.bench = bench
        self.guarantee = guarantee
        self.group = f"quix-bench-{uuid.uuid4().hex[:8]}"
        self.state_dir = tmp / "quix-state"
        self.logs = tmp

    def run(self, phase: str, records: int = 0) -> dict[str, Any]:
        """One child to its end; its JSON result. Its log (stderr) goes to a file."""
        cmd = [self.python, str(Path(__file__).resolve()), _CHILD, phase,
               "--bootstrap", self.bench.bootstrap, "--topic", self.bench.topic,
               "--group", self.group, "--state-dir", str(self.state_dir),
               "--guarantee", self.guarantee, "--extra", json.dumps(self.bench.extra),
               "--records", str(records)]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        log = self.logs / f"quix-{phase}-{uuid.uuid4().hex[:6]}.log"
        with log.open("wb") as err:
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, env=env,
                                  stdin=subprocess.DEVNULL, timeout=_CHILD_TIMEOUT_S,
                                  check=False)
        if done.returncode != 0:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"quixstreams {phase} exited with {done.returncode}:\n{tail}")
        result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
        return result

    def changelog_ends(self) -> dict[tuple[str, int], int]:
        """End offsets of the app's changelog partitions (found by its naming)."""
        from confluent_kafka import Consumer, TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bench.bootstrap})
        meta = admin.list_topics(timeout=_ADMIN_TIMEOUT_S).topics
        names = [t for t in meta if t.startswith("changelog__") and self.group in t]
        if not names:
            raise RuntimeError(f"no changelog topic of {self.group} on the broker")
        consumer = Consumer(self.bench.settings(**{"group.id": f"ends-{uuid.uuid4().hex}"}))
        try:
            return {(t, p): int(consumer.get_watermark_offsets(
                TopicPartition(t, p), timeout=_ADMIN_TIMEOUT_S)[1])
                for t in names for p in meta[t].partitions}
        finally:
            consumer.close()


def run_raw(bench: Bench, ends: dict[tuple[str, int], int]) -> tuple[float, int]:
    """Seconds for a plain consumer to read the changelog partitions to their end."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(bench.settings(**{
        "group.id": f"raw-{uuid.uuid4().hex}", "enable.auto.commit": False,
        "isolation.level": "read_committed",
        # as bench/changelog_cost.py's raw phase: librdkafka's default (1 s) idles a
        # reader that drains its queue faster than it fills
        "fetch.queue.backoff.ms": 5}))
    try:
        parts = [TopicPartition(t, p, 0) for t, p in ends]
        targets = list(ends.values())
        started = time.perf_counter()
        consumer.assign(parts)
        count = 0
        deadline = time.monotonic() + _CHILD_TIMEOUT_S
        while time.monotonic() < deadline:
            count += sum(1 for m in consumer.consume(_RAW_BATCH, 0.1) if not m.error())
            positions = consumer.position(parts)
            if all(tp.offset >= end for tp, end in zip(positions, targets, strict=True)):
                return time.perf_counter() - started, count
        raise RuntimeError("raw consume of the changelog did not reach its end")
    finally:
        consumer.close()


def measure(records: int, keys: int, partitions: int, rounds: int, guarantee: str,
            quix_python: str, bootstrap: str | None,
            report: Callable[[str], None], kind: str = "kafka") -> dict[str, Any]:
    """Best restore and raw times over `rounds` rounds on one changelog, on a broker of
    `kind` unless `bootstrap` is given."""
    from _common import start_broker
    from _phases import prepared  # the same input as bench/processor_rates.py

    with ExitStack() as stack:
        broker = None if bootstrap else stack.enter_context(start_broker(kind))
        bench, tmp = prepared(stack, bootstrap or broker.bootstrap,  # type: ignore[union-attr]
                              partitions, records, keys, "quix-bench-", report)
        if broker is not None:          # the clients' profile on this broker
            bench.extra = dict(broker.daemon.get("kafka", {}))
            bench.broker_pid = broker.pid
        quix = QuixRun(quix_python, bench, guarantee, tmp)
        processed = quix.run("process", records)
        ends = quix.changelog_ends()
        changelog = sum(ends.values())
        report(f"quixstreams {processed['quixstreams']} ({guarantee}) processed the input "
               f"in {processed['seconds']:.1f}s ({records / processed['seconds']:,.0f} "
               f"records/s); changelog end offsets total {changelog:,} over "
               f"{len(ends)} partitions")
        best: dict[str, float] = {}
        applied = read = 0
        for r in range(rounds):
            rec = quix.run("recover")
            applied = rec["applied"]
            report(f"round {r + 1}: restore {applied:,} changelog records "
                   f"{rec['seconds']:7.2f}s {applied / rec['seconds']:>10,.0f} records/s "
                   f"(to the last record {rec['to_last_record']:.2f}s, "
                   f"{applied / rec['to_last_record']:,.0f}/s; app start-up before "
                   f"recovery {rec['startup']:.2f}s)")
            raw_s, read = run_raw(bench, ends)
            report(f"round {r + 1}: raw consume {read:,} changelog records "
                   f"{raw_s:7.2f}s {read / raw_s:>10,.0f} records/s; restore / raw "
                   f"{(applied / rec['seconds']) / (read / raw_s):.2f}")
            for name, seconds in (("restore", rec["seconds"]),
                                  ("restore_to_last", rec["to_last_record"]),
                                  ("raw", raw_s)):
                best[name] = min(best.get(name, float("inf")), seconds)
    restore_rate = applied / best["restore"]
    raw_rate = read / best["raw"]
    return {"records": records, "keys": keys, "partitions": partitions, "rounds": rounds,
            "guarantee": guarantee, "quixstreams": processed["quixstreams"],
            "embedded": kind == "embedded" and not bootstrap,
            "broker": "external" if bootstrap else kind, "changelog_records": changelog,
            "restored_records": applied, "raw_records": read,
            "restore_rate": restore_rate,
            "restore_rate_to_last_record": applied / best["restore_to_last"],
            "raw_rate": raw_rate, "ratio": restore_rate / raw_rate,
            "process_rate": records / processed["seconds"]}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [_CHILD]:
        return _child_main(argv[1:])
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--guarantee", choices=["at-least-once", "exactly-once"],
                        default="at-least-once", help="quixstreams' processing_guarantee")
    parser.add_argument("--quix-python", default=_QUIX_PYTHON,
                        help="an interpreter with quixstreams installed")
    parser.add_argument("--broker", choices=["kafka", "embedded"], default="kafka",
                        help="the broker to start (default: Apache Kafka)")
    parser.add_argument("--bootstrap", help="an existing broker instead of starting one")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    if args.records <= 0 or args.keys <= 0 or args.partitions <= 0 or args.rounds <= 0:
        parser.error("--records, --keys, --partitions and --rounds must be positive")

    def report(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    result = measure(args.records, args.keys, args.partitions, args.rounds, args.guarantee,
                     args.quix_python, args.bootstrap, report, args.broker)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"broker: {result['broker']}")
    print(f"quixstreams {result['quixstreams']} processing ({result['guarantee']}) "
          f"{result['process_rate']:>10,.0f} records/s")
    print(f"quixstreams {result['quixstreams']} restore  {result['restore_rate']:>10,.0f} "
          f"changelog records/s ({result['restore_rate_to_last_record']:,.0f}/s to the "
          f"last record)")
    print(f"raw consume of the same partitions {result['raw_rate']:>10,.0f} records/s")
    print(f"restore / raw {result['ratio']:.2f} ({result['restored_records']:,} records, "
          f"{result['partitions']} partitions, best of {result['rounds']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
