"""A long run under churn: do memory, open files and threads stay flat, and does the
oracle hold (a script; tests/bench/test_soak.py runs a 3-minute one).

One broker (`--broker`: Apache Kafka by default, or the embedded noida-db), one job
config (StampedSum, the demo's running sum, over 4 input partitions), two coordinators
(a leader and a standby, both in `coordinator.url`), two processors p1 and p2 that run
throughout, and steady keyed traffic (`--rate` records a second over `--keys` keys).
The stores get a memory budget fitted to that state (`STORE`, below).
On a schedule spread over the run (an operation every `spacing` seconds: the run's
length over the cycle's, at most 40 s) it repeats a cycle of operations:

scale_out        start p3, `baton wait --until balanced --processors p3`
processor_kill   SIGKILL p3, start it again (same id and stores), wait balanced
drain            `baton drain --processor p3 --wait`
expand_split     `baton expand` (4 -> 8 partitions, the traffic held meanwhile as a
                 producer must), then `baton split`, wait balanced; the first cycle
                 only, since partitions only grow
failover         SIGKILL the leading coordinator, wait until the standby leads, start
                 the killed one again as the standby, wait balanced
broker_restart   a clean stop and a start of the broker on the same port and log, wait
                 balanced

Each cycle ends in the shape it began in (p1 and p2, balanced). The first cycle always
runs to its end, even past `--minutes`. Every `--sample-every` seconds each daemon's
RSS, open fds, threads and open store files (fds into the state directory) are
sampled (bench/soak_sampling.py) into `soak.csv`, drawn into `soak.png`. At the end
the traffic stops, every record is committed, and the running-sum oracle reads both
topics (lost, duplicated, wrong); the pause of each handoff is the largest gap between
the outputs of its task's keys while it was in flight (orchestrator/devkit/pauses.py,
as the demo and bench/handoff_pause.py read it; handoffs of tasks split later have
none). The daemons' logs stay in `--out` (a fresh directory by default).

    .venv/bin/python bench/soak.py --minutes N [--broker kafka|embedded] [--json]
        [--out DIR] [--rate 200] [--keys 4000] [--sample-every 10]

`--json` prints one object: {"minutes", "lost", "duplicated", "wrong", "operations":
{name: count}, "daemons": [{"name", "rss_mb_start", "rss_mb_end",
"rss_slope_mb_per_hour", "fds_start", "fds_end", "threads_start", "threads_end"}],
"picture": path}.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import tomllib
import zlib
from pathlib import Path
from typing import Any

from _common import (
    BenchBroker,
    Traffic,
    broker_option,
    log,
    report,
    start_broker,
    stop_on_sigterm,
    wait_until,
)
from soak_churn import CYCLE, Churn, SoakError
from soak_sampling import Sampler, daemon_figures, draw, slope_window

from orchestrator.devkit.cluster import committed_all, create_topics, read_topic
from orchestrator.devkit.demo import make_config
from orchestrator.devkit.embedded import free_port
from orchestrator.devkit.pauses import handoff_pauses, pause_gaps, percentile
from orchestrator.devkit.settings_report import changed_settings
from orchestrator.wire.barrier import input_records
from orchestrator.wire.config import dump_config
from processor.oracle import OracleResult, check_running_sums

PARTITIONS = 4
# The stores' budget, fitted to the soak's state (`--keys` keys, a few hundred KB a
# store): memtables of 1 MiB, 4 MiB for all of a processor's together. At the defaults
# (16 MiB a memtable, 256 MiB together) a memtable keeps every update of a key until it
# is full, which the soak's traffic takes hours to reach: the processors' RSS would rise
# by their memtables all hour, toward that bound (docs/operations.md, "Capacity planning").
STORE = {"write_buffer_mb": 1, "memtables_mb": 4}
# a replaced producer's close: it aborts for up to 60 s, and one that could not end its
# transaction is dropped and goes with the next full collection, at most 30 s later
# (processor/runtime/producer_close.py, orchestrator/wire/collector.py). After a broker
# restart the clients a processor replaced can take longer to go: in a 3-minute soak
# one processor still held four more than its floor 145 s after the restart, and the
# hour's soak saw such extra clients for a few minutes. The wait ends as soon as every
# daemon is down to its floor, or once every count has held still for QUIET_S with the
# job balanced (bench/soak_sampling.py: a client kept for good, fences a loaded host
# caused after the last operation); this is its bound. A client that never goes still
# shows in the end sample.
CLOSES_S = 420.0
WARM_S = 15.0               # traffic before the first operation: state to move
MAX_SPACING_S = 40.0
JOB = "soak"


def _config(workdir: Path, broker: BenchBroker, processor_timeout_ms: int
            ) -> tuple[Path, list[str]]:
    """The job's config with two coordinator URLs; returns it and their listens."""
    config = make_config(workdir, broker.bootstrap, ("events", "sums"), broker.daemon)
    raw = tomllib.loads(config.read_text())
    raw["job"]["name"] = JOB
    listens = [raw["coordinator"]["listen"], f"127.0.0.1:{free_port()}"]
    raw["coordinator"].update({"url": [f"http://{x}" for x in listens],
                               "processor_timeout_ms": processor_timeout_ms})
    raw["store"] = {**raw.get("store", {}), **STORE}
    config.write_text(dump_config(raw))
    return config, listens


def _schedule(churn: Churn, minutes: float, started: float) -> None:
    """The operations, one every `spacing` seconds, until the run's end (the first
    cycle always completes)."""
    spacing = min(MAX_SPACING_S, (minutes * 60 - WARM_S) / len(CYCLE))
    end = started + minutes * 60
    done = 0
    while True:
        cycle = CYCLE if done < len(CYCLE) else [o for o in CYCLE if o != "expand_split"]
        first = done < len(CYCLE)
        name = CYCLE[done] if first else cycle[(done - len(CYCLE)) % len(cycle)]
        slot = started + WARM_S + done * spacing
        if not first and slot >= end:
            break
        time.sleep(max(0.0, slot - time.monotonic()))
        churn.run(name)
        done += 1
    time.sleep(max(0.0, end - time.monotonic()))


def _oracle(bootstrap: str) -> tuple[OracleResult, list[Any], list[Any]]:
    inputs = input_records(read_topic(bootstrap, "events"))
    outputs = read_topic(bootstrap, "sums")
    result = check_running_sums([(m.key(), m.value()) for m in inputs],
                                [(m.key(), m.value()) for m in outputs])
    return result, inputs, outputs


def run(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The whole soak; the summary (pinned keys first, then what the lines print)."""
    with start_broker(args.broker) as broker:
        create_topics(broker.settings(), {"events": PARTITIONS, "sums": PARTITIONS})
        config, listens = _config(out, broker, args.processor_timeout_ms)
        churn = Churn(out, config, listens, broker, PARTITIONS)
        # log_level 2: its complaints while the broker restarts would bury the progress
        churn.traffic = Traffic(broker.bootstrap, "events", args.keys, args.rate,
                                lambda key: zlib.crc32(key) % churn.partitions,
                                {**broker.client, "log_level": 2})
        traffic = churn.traffic
        sampler = Sampler(churn.daemons, churn.shape, out / "state", args.sample_every)
        picture = out / "soak.png"
        try:
            churn.start()
            traffic.start()
            sampler.start()
            started = sampler.started
            _schedule(churn, args.minutes, started)
            churn.settle()
            sampler.settle_clients(CLOSES_S)
            sampler.sample()            # the end: balanced, in the cycle's first shape
            seconds = time.monotonic() - started
            traffic.stop()
            wait_until("every record committed", lambda: _committed(broker.bootstrap),
                       300, 0.5)
            tasks = {t["name"]: t["partitions"] for t in churn.status()["tasks"]}
        finally:
            sampler.stop()
            traffic.stop()
            churn.stop()
            # kept when an operation failed too: what the daemons held until then
            sampler.write_csv(out / "soak.csv")
            draw(sampler.samples, [(t - sampler.started, n) for t, n, _ in churn.done],
                 picture, f"bench/soak.py --minutes {args.minutes:g} --broker {args.broker}")
        oracle, inputs, outputs = _oracle(broker.bootstrap)
    gaps = pause_gaps(churn.watches(), inputs, outputs, tasks)
    shutil.rmtree(out / "state", ignore_errors=True)
    operations = {name: sum(1 for _, n, _ in churn.done if n == name) for name in CYCLE}
    window = slope_window(seconds)
    return {"minutes": round(seconds / 60, 2), "lost": oracle.lost,
            "duplicated": oracle.duplicated, "wrong": oracle.wrong,
            "operations": operations,
            "daemons": daemon_figures(sampler.samples, window),
            "picture": str(picture),
            "_settings": changed_settings(config), "_oracle": oracle,
            "_lost": lost_inputs(inputs, outputs) if oracle.lost else [],
            "_window": window, "_seconds": seconds, "_churn": churn,
            "_pauses": handoff_pauses(churn.watches(), gaps), "_csv": out / "soak.csv"}


def lost_inputs(inputs: list[Any], outputs: list[Any], most: int = 10) -> list[str]:
    """Where the inputs whose running sum never came out were, and where the output
    before each went: their partitions, offsets and times name the operation and the
    transaction that lost them."""
    sums: dict[bytes, int] = {}
    came: dict[tuple[bytes, int], Any] = {(m.key(), int(m.value())): m for m in outputs}
    lines: list[str] = []
    before: dict[bytes, Any] = {}
    for m in inputs:
        key = m.key()
        total = sums[key] = sums.get(key, 0) + int(m.value())
        out = came.get((key, total))
        if out is None and len(lines) < most:
            prior = before.get(key)
            lines.append(f"lost: key {key!r} sum {total}: input {m.topic()}:{m.partition()}"
                         f"@{m.offset()} written {_at(m)}; the output before it "
                         + ("none" if prior is None else
                            f"{prior.topic()}:{prior.partition()}@{prior.offset()} {_at(prior)}"))
        if out is not None:
            before[key] = out
    return lines


def _at(message: Any) -> str:
    ms = message.timestamp()[1]
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def _committed(bootstrap: str) -> bool:
    committed, end = committed_all(bootstrap, "events", f"baton.{JOB}")
    return committed >= end


def _lines(args: argparse.Namespace, s: dict[str, Any]) -> list[str]:
    oracle: OracleResult = s["_oracle"]
    window = ("after the first 10 minutes" if s["_seconds"] >= 1200 else
              "over the second half of the run (runs under 20 minutes)")
    lines = [f"broker: {args.broker}; {s['minutes']} minutes; {args.rate:g} records/s over "
             f"{args.keys} keys",
             "settings changed from the defaults: "
             + ", ".join(f"{k} = {v}" for k, v in s["_settings"].items()),
             f"oracle: {oracle.records_in} records in, {oracle.records_out} out; lost "
             f"{oracle.lost}, duplicated {oracle.duplicated}, wrong {oracle.wrong}",
             *oracle.examples, *s["_lost"], "operations (count, seconds each):"]
    for name, count in s["operations"].items():
        took = [d for _, n, d in s["_churn"].done if n == name]
        lines.append(f"  {name:<15} {count:>3}  " + ", ".join(f"{d:.1f}" for d in took))
    lines.append(f"daemons (RSS slope {window}; start and end: samples of the same "
                 "balanced shape):")
    for d in s["daemons"]:
        slope = d["rss_slope_mb_per_hour"]
        lines.append(f"  {d['name']:<6} RSS {d['rss_mb_start']:>6.1f} -> "
                     f"{d['rss_mb_end']:>6.1f} MB (slope "
                     f"{'-' if slope is None else f'{slope:+.1f}'} MB/hour); fds "
                     f"{d['fds_start']} -> {d['fds_end']}; threads {d['threads_start']} -> "
                     f"{d['threads_end']}")
    pauses = [p["pause_ms"] for p in s["_pauses"] if p["pause_ms"] is not None]
    lines.append(f"handoffs: {len(s['_pauses'])}; pause p50 {percentile(pauses, 50):.0f} ms, "
                 f"p99 {percentile(pauses, 99):.0f} ms, max {max(pauses, default=0):.0f} ms")
    for p in s["_pauses"]:
        pause = "-" if p["pause_ms"] is None else f"{p['pause_ms']:.0f} ms"
        lines.append(f"  {p['task']:<14} {p['kind']:<5} {p['from']} -> {p['to']} "
                     f"{p['outcome']:<9} {pause:>8} at {p['at'] or '-'}")
    lines.append(f"samples: {s['_csv']}; picture: {s['picture']}")
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True)
    broker_option(parser)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the samples, the picture and the daemons' logs go "
                             "(default: a new directory under the system's temp)")
    parser.add_argument("--rate", type=float, default=200.0, help="records a second")
    parser.add_argument("--keys", type=int, default=4000)
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds")
    parser.add_argument("--processor-timeout-ms", type=int, default=10_000,
                        help="coordinator.processor_timeout_ms (default: Baton's, 10000; "
                             "a broker restart outlasts it, and must not cost a processor)")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.rate <= 0 or args.keys <= 0 or args.sample_every <= 0:
        parser.error("--minutes, --rate, --keys and --sample-every must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()           # an hour's run is often ended by `timeout` or a runner
    out = args.out or Path(tempfile.mkdtemp(prefix="baton-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    log(f"soak: {args.minutes:g} minutes on {args.broker}; logs and samples in {out}")
    try:
        summary = run(args, out)
    except SoakError as exc:
        print(f"soak failed: {exc}; the daemons' logs, the samples (soak.csv) and their "
              f"picture (soak.png) are in {out}", file=sys.stderr)
        return 1
    pinned = {k: v for k, v in summary.items() if not k.startswith("_")}
    if args.json:               # the lines too, for the person watching (stderr)
        for line in _lines(args, summary):
            log(line)
    report(pinned, args.json, _lines(args, summary))
    return 0 if summary["_oracle"].ok else 1


if __name__ == "__main__":
    sys.exit(main())
