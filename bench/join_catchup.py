"""Catch-up inside a real join against the same catch-up alone: a script.

For each --source (input, changelog), in one run, on one kind of broker (`--broker`:
Apache Kafka by default, or the embedded noida-db; a fresh one for each phase):

alone    the catch-up by itself, in this process (a warmup TaskRuntime driven in the
         processor daemon's rounds, ROUND_S; no daemons, no traffic): `input` replays
         --keys records (one per key, 4 partitions) through process()
         (bench/processor_rates.py's warmup); `changelog` applies the changelog an
         active task wrote for the same records (bench/changelog_cost.py).
join     a coordinator and p1 holding that state (--keys keys over 4 partitions), then
         p2 joins (no traffic) and catches up half of the state (bench/handoff_pause.py
         with no handoffs after the join): the records p2 caught up (its
         baton_catchup_records_total) over the time from p2's start to the last
         handoff's done in the coordinator's log (the job balanced).
         Also shown: the same volume over the coordinator's catching-up window (first
         task of p2 entering catching_up -> last one leaving it: no process start,
         registration or final handoff in it), and each process's CPU seconds during
         the join (with noida-db, idle consumers spin: it answers fetches at once).

beside   the alone run again beside an idle consumer of the input's 4 partitions in
         another process (what p1, idle in the join, cost on this broker before the
         embedded profile's idle back-off, processor.idle_fetch_backoff_ms; not a target).

`--kafka KEY=VALUE` adds a [kafka] setting (librdkafka's) to the catch-up's and the
daemons' clients in every phase, on top of the broker's profile: `queued.min.messages=1`
on Kafka measures the embedded profile's setting there (docs/performance.md,
"Embedded-only settings, measured on Apache Kafka").

Each of them starts once the embedded broker's saves of what was written before are
done (wait_broker_quiet, bench/_common.py): it rewrites everything it holds after writes,
seconds of CPU at these sizes, and that must not land in one measure and not the other.

Target: join >= 0.5 x alone, for both sources; the time to balanced is reported too.

    PYTHONPATH=. .venv/bin/python bench/join_catchup.py [--keys 1000000]
        [--source input changelog] [--broker kafka|embedded] [--kafka KEY=VALUE]
        [--alone-only] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from _common import broker_option, start_broker, wait_broker_quiet
from _handoffs import run_size
from _phases import Bench, run_active_source, run_apply, run_warmup

from processor.daemon import ROUND_S  # noqa: E402

TARGET = 0.5
JOB = "processor.examples:RunningSum"


def alone(source: str, keys: int, beside_idle: bool = False, kind: str = "kafka",
          kafka: dict[str, Any] | None = None) -> float:
    """Records (or changelog records) per second of the catch-up by itself; with
    `beside_idle`, beside an idle consumer of the input's 4 partitions in another
    process (what p1, idle in the join, costs on this broker); `kafka`: [kafka]
    settings on top of the broker's profile."""
    with tempfile.TemporaryDirectory(prefix="baton-join-") as tmp, start_broker(kind) as broker:
        bench = Bench(broker.bootstrap, {**broker.daemon.get("kafka", {}), **(kafka or {})}, 4,
                      Path(tmp) / "state")
        bench.create_topics()
        bench.produce(keys, keys)
        catch_up = dict(broker.daemon.get("catch_up", {}))
        job = ""
        if source == "changelog":
            _, job, _ = run_active_source(bench, keys, JOB, "changelog", catch_up)
        wait_broker_quiet(broker.pid)    # as before the join
        with _idle_consumer(broker.bootstrap, bench.topic) if beside_idle else nullcontext():
            if source == "input":
                return keys / run_warmup(bench, keys, ROUND_S)
            seconds, applied = run_apply(bench, job, JOB, catch_up)
            return applied / seconds


@contextmanager
def _idle_consumer(bootstrap: str, topic: str) -> Iterator[None]:
    spinner = subprocess.Popen([sys.executable, str(Path(__file__).with_name("idle_consumer.py")),
                                "--bootstrap", bootstrap, "--spin", topic, "--seconds", "600"])
    try:
        time.sleep(1.0)         # connected and fetching
        yield
    finally:
        spinner.terminate()
        spinner.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--source", nargs="+", default=["input", "changelog"],
                        choices=["input", "changelog"])
    parser.add_argument("--json", action="store_true")
    broker_option(parser)
    parser.add_argument("--kafka", action="append", default=[], metavar="KEY=VALUE",
                        help="a [kafka] setting on top of the broker's profile (repeatable)")
    parser.add_argument("--alone-only", action="store_true",
                        help="only the catch-up alone: compares --kafka settings")
    args = parser.parse_args()
    kafka = _settings(parser, args.kafka)

    def log(text: str) -> None:
        print(f"# {text}", file=sys.stderr, flush=True)

    rows = []
    for source in args.source:
        rate_alone = alone(source, args.keys, kind=args.broker, kafka=kafka)
        log(f"{source}: alone {rate_alone:,.0f} records/s")
        if args.alone_only:
            rows.append({"broker": args.broker, "kafka": kafka, "source": source,
                         "keys": args.keys, "alone_per_s": round(rate_alone)})
            continue
        rate_beside = alone(source, args.keys, beside_idle=True, kind=args.broker, kafka=kafka)
        log(f"{source}: alone beside an idle consumer {rate_beside:,.0f} records/s")
        joined = run_size(args.keys, 0, log, source=source, kind=args.broker, kafka=kafka)
        rate_join = joined["catch_up_records_per_s"]
        window = joined["catching_up_s"]
        rate_window = joined["catch_up_records"] / window if window else 0.0
        rows.append({"broker": args.broker, "kafka": kafka, "source": source,
                     "keys": args.keys, "alone_per_s": round(rate_alone),
                     "join_per_s": round(rate_join),
                     "join_to_balanced_s": joined["join_to_balanced_s"],
                     "catch_up_records": joined["catch_up_records"],
                     # three places: 0.4996 is a miss, and two places would print 0.5
                     "ratio": round(rate_join / rate_alone, 3),
                     "met": rate_join >= TARGET * rate_alone,
                     "catching_up_s": window, "catching_up_per_s": round(rate_window),
                     "catching_up_ratio": round(rate_window / rate_alone, 2),
                     "alone_beside_idle_per_s": round(rate_beside),
                     "beside_idle_ratio": round(rate_beside / rate_alone, 2),
                     "join_cpu_s": joined["join_cpu_s"]})
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"broker: {args.broker}" + (f", [kafka] {kafka}" if kafka else ""))
    if args.alone_only:
        for r in rows:
            print(f"{r['source']:>9}, {r['keys']} keys: alone {r['alone_per_s']:,}/s")
        return 0
    for r in rows:
        print(f"{r['source']:>9}, {r['keys']} keys: join -> balanced {r['join_to_balanced_s']} s "
              f"for ~{r['catch_up_records']} records, {r['join_per_s']:,}/s in the join vs "
              f"{r['alone_per_s']:,}/s alone: {r['ratio']}x (target >= {TARGET}: "
              f"{'ok' if r['met'] else 'MISSED'}); from the first task catching up "
              f"to the last caught up {r['catching_up_s']} s, {r['catching_up_per_s']:,}/s: "
              f"{r['catching_up_ratio']}x; CPU seconds during the join {r['join_cpu_s']}; "
              f"alone beside an idle consumer {r['alone_beside_idle_per_s']:,}/s "
              f"({r['beside_idle_ratio']}x of alone)")
    return 0


def _settings(parser: argparse.ArgumentParser, pairs: list[str]) -> dict[str, Any]:
    """KEY=VALUE pairs as librdkafka settings (an integer stays one)."""
    settings: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            parser.error(f"--kafka {pair!r}: expected KEY=VALUE")
        settings[key] = int(value) if value.lstrip("-").isdigit() else value
    return settings


if __name__ == "__main__":
    sys.exit(main())
