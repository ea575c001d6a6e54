"""The cost of catch_up.source = "changelog" on active tasks, and the changelog apply rate.

One run, one broker (`--broker`: Apache Kafka by default, or the embedded noida-db;
--bootstrap: an existing one, with Kafka's profile), one input topic of
`--partitions` partitions holding `--records` records over `--keys` keys (the input of
bench/processor_rates.py):

input      a TaskRuntime holding every task active from offset 0: exactly-once output,
           a transaction per task per poll batch (catch_up.source = "input").
changelog  the same with catch_up.source = "changelog": each transaction also writes one
           changelog record per key it changed, plus its input offsets, to the task's
           partition of a compacted changelog topic.
apply      warmups of every task applying a changelog (no process()), timed until each
           has reached its partition's committed end. The changelog is written once,
           by active tasks of the `changelog` phase processing --apply-keys records of
           as many keys (one changelog record each; default 1,000,000): its own input,
           so that setting up the warmups (creating four RocksDB stores, ~3-9 ms each
           here) is not most of the time measured (~0.15 s for the ~130,000 records
           the default workload writes).
raw        a plain confluent-kafka consumer (read_committed, batches of 10,000, waiting
           at most --loop-ms for one, as the apply's rounds do) reading
           the same changelog partitions to their end: the limit the apply loop is
           measured against in the same round. Target: apply >= 0.6 x raw.
floor      the raw consumer again, putting each batch's records as they are into a
           RocksDB store per partition (a changelog replica's store options): what any apply loop
           costs at least, shown as a fraction of raw.

Timed from apply() until every task's committed offsets reach the input's end (active
phases) or every warmup's lag is 0 (apply). Target: changelog >= 0.8 x input. Each
phase starts once the embedded broker's save of what the previous one wrote is done
(_common.wait_broker_quiet: it rewrites everything it holds after writes, up to a
CPU-second at these sizes), and the best rate of each phase over the rounds is taken.

The runtimes are driven as the processor daemon drives them: poll() rounds of
`--loop-ms` (default: the daemon's ROUND_S), transactions every commit_interval_ms
(100 ms). `--loop-ms 100` commits every round instead, a transaction per poll batch of
~5,000 records: a stricter case than the daemon's rounds.

    .venv/bin/python bench/changelog_cost.py [--records N] [--keys K] [--rounds R]
        [--loop-ms MS] [--apply-keys N] [--job processor.examples:RunningSum]
        [--broker kafka|embedded] [--bootstrap HOST:PORT] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import rocksdict
from _common import broker_name, broker_option, start_broker, wait_broker_quiet
from _phases import ADMIN_TIMEOUT_S, Bench, prepared, run_active_source, run_apply
from confluent_kafka import Consumer, Message, TopicPartition

from orchestrator.wire.changelog import changelog_topic
from processor.daemon import ROUND_S
from store.options import db_options

__all__ = ["main", "measure"]

TARGET = 0.8                 # active with changelog writes >= 0.8 x without
APPLY_TARGET = 0.6           # changelog apply >= 0.6 x raw consume of it


def run_raw(bench: Bench, job: str, write_to: Path | None = None,
            loop_s: float = ROUND_S) -> tuple[float, int]:
    """Seconds for a plain consumer to read `job`'s changelog partitions to their end,
    waiting at most `loop_s` for a batch, as the apply's rounds do (a longer wait for a
    batch that is not full yet idles it); with `write_to`, each batch's records are also
    put, as they are, into a RocksDB store per partition (a changelog replica's store
    options): the floor of any apply loop."""
    topic = changelog_topic(job)
    consumer = Consumer({"bootstrap.servers": bench.bootstrap, "group.id": f"raw-{job}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         # as the replay consumer: librdkafka's default (1 s) idles a
                         # reader that drains its queue faster than it fills
                         "fetch.queue.backoff.ms": 5, **bench.extra})
    # timed from here, as the apply is from runtime.apply(): its consumers exist, its
    # stores open and its partitions' ends are looked up inside the time
    started = time.perf_counter()
    stores = {p: rocksdict.Rdict(str(write_to / str(p)), options=db_options(True, reads=False))
              for p in range(bench.partitions)} if write_to is not None else {}
    try:
        parts = [TopicPartition(topic, p, 0) for p in range(bench.partitions)]
        ends = [consumer.get_watermark_offsets(tp, timeout=ADMIN_TIMEOUT_S)[1]
                for tp in parts]
        consumer.assign(parts)
        count = 0
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            batch = [m for m in consumer.consume(10_000, loop_s) if not m.error()]
            count += len(batch)
            if stores:
                _write(stores, batch)
            positions = consumer.position(parts)
            if all(tp.offset >= end for tp, end in zip(positions, ends, strict=True)):
                return time.perf_counter() - started, count
        raise RuntimeError(f"raw consume of {topic} did not reach its end")
    finally:
        consumer.close()
        for store in stores.values():
            store.close()


def _write(stores: dict[int, rocksdict.Rdict], batch: list[Message]) -> None:
    """One WriteBatch per partition's run, put without a Python step per record (the
    bench's job never deletes, so every value is bytes)."""
    for partition, run in itertools.groupby(batch, Message.partition):
        records = list(run)
        writes = rocksdict.WriteBatch(raw_mode=True)
        deque(map(writes.put, map(Message.key, records), map(Message.value, records)),
              maxlen=0)
        stores[partition].write(writes)


def measure(records: int, keys: int, partitions: int, rounds: int, job_class: str,
            bootstrap: str | None, report: Callable[[str], None],
            loop_s: float = ROUND_S, apply_keys: int = 1_000_000,
            kind: str = "kafka") -> dict[str, Any]:
    """Best rate of each phase over `rounds` rounds; each phase starts on a quiet broker
    (the embedded one saves what it holds after writes). A broker of `kind` is started
    unless `bootstrap` is given."""
    with ExitStack() as stack:
        broker = None if bootstrap else stack.enter_context(start_broker(kind))
        bench, tmp = prepared(stack, bootstrap or broker.bootstrap,  # type: ignore[union-attr]
                              partitions, records, keys, "baton-bench-", report)
        catch_up: dict[str, Any] = {}
        if broker is not None:          # the daemons' profile on this broker
            bench.extra = dict(broker.daemon.get("kafka", {}))
            bench.broker_pid = broker.pid
            catch_up = dict(broker.daemon.get("catch_up", {}))

        def quiet() -> None:
            wait_broker_quiet(bench.broker_pid)

        applied_bench = Bench(bench.bootstrap, bench.extra, partitions, bench.state_root)
        applied_bench.broker_pid = bench.broker_pid
        applied_bench.create_topics()
        applied_bench.produce(apply_keys, apply_keys)
        quiet()
        seconds, apply_job, apply_records = run_active_source(
            applied_bench, apply_keys, job_class, "changelog", catch_up, loop_s)
        report(f"the apply's changelog: {apply_records:,} records written by active tasks "
               f"processing {apply_keys:,} keys in {seconds:.2f}s")
        best: dict[str, float] = {}     # phase -> best rate (records/s) over the rounds
        written = 0
        for r in range(rounds):
            for source in ("input", "changelog"):
                quiet()
                seconds, _, count = run_active_source(bench, records, job_class, source,
                                                      catch_up, loop_s)
                report(f"round {r + 1}: active, {source:<9} {seconds:7.2f}s "
                       f"{records / seconds:>10,.0f} records/s"
                       + (f" ({count:,} changelog records)" if count else ""))
                best[source] = max(best.get(source, 0.0), records / seconds)
                written = count or written
            rates = _apply_round(applied_bench, tmp, apply_job, job_class, catch_up, loop_s,
                                 quiet)
            report(f"round {r + 1}: apply {rates['apply']:>10,.0f} changelog records/s, raw "
                   f"consume {rates['raw']:>10,.0f}/s: apply / raw "
                   f"{rates['apply'] / rates['raw']:.2f}; raw consume + RocksDB writes "
                   f"{rates['floor']:>10,.0f}/s: {rates['floor'] / rates['raw']:.2f}x raw")
            for phase, rate in rates.items():
                best[phase] = max(best.get(phase, 0.0), rate)
    ratio = best["changelog"] / best["input"]
    return {"records": records, "keys": keys, "partitions": partitions, "rounds": rounds,
            "loop_ms": loop_s * 1000, "job": job_class,
            "broker": broker_name(kind, bootstrap),
            "input_rate": best["input"], "changelog_rate": best["changelog"],
            "changelog_records": written, "apply_changelog_records": apply_records,
            "apply_rate": best["apply"], "raw_rate": best["raw"],
            "apply_ratio": best["apply"] / best["raw"],
            "floor_rate": best["floor"],
            "apply_target": APPLY_TARGET,
            "ratio": ratio, "target": TARGET, "ok": ratio >= TARGET}


def _apply_round(bench: Bench, tmp: Path, job: str, job_class: str,
                 catch_up: dict[str, Any], loop_s: float, quiet: Callable[[], None]
                 ) -> dict[str, float]:
    """Records/s of the apply, the raw consume and the floor of one changelog, each
    timed on a quiet broker."""
    quiet()
    apply_s, applied = run_apply(bench, job, job_class, catch_up, loop_s)
    quiet()
    raw_s, read = run_raw(bench, job, loop_s=loop_s)
    if read != applied:
        raise RuntimeError(f"the apply took {applied:,} changelog records, the raw "
                           f"consume read {read:,}")
    quiet()
    floor_s, _ = run_raw(bench, job, Path(tempfile.mkdtemp(dir=tmp)), loop_s)
    return {"apply": applied / apply_s, "raw": read / raw_s, "floor": read / floor_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--apply-keys", type=int, default=1_000_000,
                        help="keys of the changelog the apply is measured on (one "
                             "changelog record each)")
    parser.add_argument("--loop-ms", type=float, default=ROUND_S * 1000,
                        help="the processor loop's poll() round (default: the daemon's)")
    parser.add_argument("--job", default="processor.examples:RunningSum")
    broker_option(parser)
    parser.add_argument("--bootstrap", help="an existing broker instead of starting one")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    if min(args.records, args.keys, args.partitions, args.rounds, args.loop_ms,
           args.apply_keys) <= 0:
        parser.error("--records, --keys, --partitions, --rounds, --loop-ms and "
                     "--apply-keys must be positive")

    def report(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    result = measure(args.records, args.keys, args.partitions, args.rounds, args.job,
                     args.bootstrap, report, args.loop_ms / 1000, args.apply_keys,
                     args.broker)
    if args.json:
        print(json.dumps(result))
        return 0
    verdict = "ok" if result["ok"] else "MISSED"
    print(f"broker: {result['broker']}")
    print(f"active, input source     {result['input_rate']:>10,.0f} records/s")
    print(f"active, changelog source {result['changelog_rate']:>10,.0f} records/s  "
          f"ratio {result['ratio']:.3f} (target >= {TARGET}: {verdict})")
    print(f"changelog apply          {result['apply_rate']:>10,.0f} changelog records/s  "
          f"{result['apply_ratio']:.2f}x the raw consume of the same partitions "
          f"({result['raw_rate']:,.0f}/s; target >= {APPLY_TARGET}: "
          f"{'ok' if result['apply_ratio'] >= APPLY_TARGET else 'MISSED'})")
    print(f"raw consume + writes     {result['floor_rate']:>10,.0f} changelog records/s  "
          f"{result['floor_rate'] / result['raw_rate']:.2f}x raw: the floor of an apply loop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
