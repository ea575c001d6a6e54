"""Handoff pause and time-to-balanced, at two state sizes (a script, not a test).

For each state size (default 10,000 and 1,000,000 keys) on a fresh broker (`--broker`:
Apache Kafka by default, `kafka3` a three-node Apache Kafka cluster with replication 3
and min.insync.replicas 2, or the embedded noida-db; the ratio compares sizes on that one):
preload one record per key over 4 input partitions, run a coordinator and p1 until
p1 has processed it all, then

- once the broker's saves of all that are done (wait_broker_quiet), start p2 and time
  "processor joins -> job balanced" (from p2's start to the last
  handoff's done in the coordinator's log) against the records p2 caught up (its
  baton_catchup_records_total);
- with live traffic (1,000 records/s), drive handoffs by draining one processor and
  restarting it, alternately, until at least --handoffs handoffs are done;
- pause per handoff = the largest gap between consecutive outputs of the moved task's
  keys while its handoff was in flight (old owner's last output -> new owner's first),
  read back from the output topic;
- each phase of the pause (orchestrator/devkit/handoff_phases.py) beside the broker's
  own floor for its step (bench/_floor.py: a commit, a fence, a committed-offsets read,
  a first fetch), measured on the same broker twice: under the same traffic with both
  processors running, once the handoffs are done, and quiet, once the traffic stopped.

Targets, at Baton's defaults on Apache Kafka: p99 <= 150 ms at 10,000 keys and <= 250 ms at
1,000,000 keys.

The daemons run the demo's settings (orchestrator/devkit/demo.py, DEMO_SETTINGS) unless
`--defaults` is given (Baton's defaults only); either way the output lists every setting
that differs from the defaults (`settings`), the broker profile's included.

    .venv/bin/python bench/handoff_pause.py [--keys 10000 1000000] [--handoffs 20] [--json]
        [--broker kafka|kafka3|embedded] [--defaults]
        [--logs DIR] [--source input|changelog] [--changelog-read-from beginning|store]

With `--source changelog` the embedded profile reads changelog partitions from their
beginning (`catch_up.changelog_read_from`, docs/operations.md): an activation then fetches
its whole partition to apply the few records it lacks, and the pause grows with the
state. `--changelog-read-from store` starts those reads at the store's position, the
default and Apache Kafka's; noida-db may then drop committed records after an aborted
transaction, which a clean drain-and-restart like this one does not produce.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from _common import BROKERS, broker_option, log, report
from _floor import FLOOR_OF
from _handoffs import run_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--handoffs", type=int, default=20)
    parser.add_argument("--source", choices=["input", "changelog"], default="input",
                        help="catch_up.source")
    parser.add_argument("--changelog-read-from", choices=["beginning", "store"], default=None,
                        help="catch_up.changelog_read_from (default: the broker profile's)")
    parser.add_argument("--defaults", action="store_true",
                        help="Baton's defaults (not the demo's heartbeat, lag, warmups)")
    parser.add_argument("--json", action="store_true")
    broker_option(parser, BROKERS)
    parser.add_argument("--logs", type=Path, default=None,
                        help="copy the daemons' logs here (one directory per size)")
    args = parser.parse_args()

    results = [run_size(k, args.handoffs, log, source=args.source, keep_logs=args.logs,
                        read_from=args.changelog_read_from, kind=args.broker,
                        defaults=args.defaults) for k in args.keys]
    settings = results[0]["settings"] if results else {}
    summary: dict[str, Any] = {"broker": args.broker, "settings": settings, "sizes": results}
    if len(results) >= 2 and results[0]["pause_ms_p99"]:
        summary["p99_ratio_largest_to_smallest"] = round(
            results[-1]["pause_ms_p99"] / results[0]["pause_ms_p99"], 2)
    lines = [f"broker: {args.broker}",
             "settings changed from the defaults: " + (", ".join(
                 f"{k} = {v}" for k, v in settings.items()) or "none")] + [
        f"{r['keys']:>9} keys: pause p50 {r['pause_ms_p50']} ms, p99 {r['pause_ms_p99']} "
        f"ms (max {r['pause_ms_max']}, {r['handoffs']} handoffs); join -> balanced "
        f"{r['join_to_balanced_s']} s for ~{r['catch_up_records']} catch-up records "
        f"({r['catch_up_records_per_s']} records/s)" for r in results]
    for r in results:
        lines.append(f"{r['keys']:>9} keys, per phase: p50 and p99 ms; the broker's own floor "
                     f"for the step (p50), quiet after the handoffs and under the same "
                     f"traffic; the ratio to the floor under traffic")
        for phase, got in r["phases_ms"].items():
            step = FLOOR_OF.get(phase)
            quiet = r["floor_ms"].get(step) if step is not None else None
            loaded = r["floor_under_traffic_ms"].get(step) if step is not None else None
            beside = (f"{step}: floor {quiet['p50']} quiet, {loaded['p50']} under traffic, "
                      f"x{got['p50'] / loaded['p50']:.1f}"
                      if quiet and loaded and loaded["p50"] else "no broker step")
            lines.append(f"    {phase:<14} {got['p50']:>8} p99 {got['p99']:>8}   {beside}")
    if "p99_ratio_largest_to_smallest" in summary:
        lines.append("p99 ratio (largest / smallest state): "
                     f"{summary['p99_ratio_largest_to_smallest']}")
    report(summary, args.json, lines)


if __name__ == "__main__":
    main()
