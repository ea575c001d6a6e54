"""Baton side by side with Kafka Streams: a script, not a test.

One Apache Kafka broker (orchestrator.devkit.kafka.KafkaBroker; `--broker kafka3`: a
three-node cluster, orchestrator.devkit.kafka_cluster.KafkaCluster, replication 3 and
min.insync.replicas 2 for both systems' topics) serves every run. For each
state size in --keys and each system in turn (Baton; Kafka Streams with its default
warmup settings, then with its fastest: bench/vs_streams.py), the same job (RunningSum:
per key, the running sum, one output per input) on the same input: 8 partitions, one
record per key, then 1,000 records/s of steady keyed traffic.

- scale-out: two instances have processed the preload and run under traffic; a third
  starts. `balanced_s` is from its start until every task it gets is active (Baton: the
  last handoff to it done; Kafka Streams: its warmups promoted and none left).
  `pause_ms_p99` is over the moved tasks: each one's longest gap between outputs of its
  keys, from the third instance's start to balanced. The new instance's rebuilt records
  per second and the CPU seconds of each side over that window (from /proc) are printed
  beside them.
- failover: two instances, one standby of every task, under traffic; one is SIGKILLed.
  `failover_s` is until every task it had outputs again from the other.
- the oracle (processor/oracle.py) over each phase's input and output topics: lost,
  duplicated, wrong (summed over both phases). Kafka Streams promises exactly-once
  (`exactly_once_v2`) as Baton does; any count above 0 is a finding.

    ./run bench vs_kafka_streams.py --keys 100000 1000000 [--json]
        [--systems baton default fastest] [--broker kafka|kafka3] [--logs DIR]

(`./run bench` first installs what a fresh clone lacks: Java, a JDK and Maven for the
peer, the Apache Kafka broker's jars, the venv; after that `.venv/bin/python
bench/vs_kafka_streams.py ...` is the same.)

`--keys 10000` is a quick smoke run (Kafka Streams' default setting still waits for its
10-minute probing rebalance: `--systems baton fastest` skips it). The Kafka Streams peer
is built with Maven the first time (bench/peers/kafka-streams).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import vs_baton
import vs_streams
from vs_common import percentile

from orchestrator.devkit.kafka import KafkaBroker
from orchestrator.devkit.kafka_cluster import KafkaCluster

__all__ = ["ROW_KEYS", "SYSTEMS", "main", "parse_args", "row", "to_json"]

SYSTEMS = ("baton", "fastest", "default")      # run in this order for each size
# the pinned --json row, in this order (docs/design.md, "What is pinned")
ROW_KEYS = ("keys", "system", "settings", "balanced_s", "pause_ms_p99", "failover_s",
            "lost", "duplicated", "wrong")
BROKERS = ("kafka", "kafka3")      # one node, or three (replication 3)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000],
                        help="state sizes (keys), each a run of every system")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                        help="baton, and Kafka Streams' default and fastest settings")
    parser.add_argument("--broker", choices=BROKERS, default="kafka",
                        help="Apache Kafka on one node, or a three-node cluster "
                             "(default: kafka)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep every instance's logs here")
    args = parser.parse_args(argv)
    if any(k <= 0 for k in args.keys):
        parser.error("--keys: every size must be a positive number of keys")
    return args


def row(keys: int, system: str, scale: dict[str, Any], fail: dict[str, Any]) -> dict[str, Any]:
    """One run's figures: the pinned keys first, then what the human table adds."""
    scale_oracle, fail_oracle = scale["oracle"], fail["oracle"]
    return {
        "keys": keys,
        "system": "baton" if system == "baton" else "kafka_streams",
        "settings": system,
        "balanced_s": float(scale["balanced_s"]),
        "pause_ms_p99": float(percentile(list(scale["gaps_ms"].values()), 99)),
        "failover_s": float(fail["failover_s"]),
        "lost": scale_oracle.lost + fail_oracle.lost,
        "duplicated": scale_oracle.duplicated + fail_oracle.duplicated,
        "wrong": scale_oracle.wrong + fail_oracle.wrong,
        "moved": scale["moved"],
        "rebuilt": scale["rebuilt"],
        "rebuilt_per_s": round(scale["rebuilt"] / max(scale["rebuilt_s"], 0.001)),
        "cpu_s": scale["cpu_s"],
        "examples": scale_oracle.examples + fail_oracle.examples,
    }


def to_json(rows: list[dict[str, Any]]) -> str:
    """The pinned --json object: {"runs": [rows with exactly ROW_KEYS]}."""
    return json.dumps({"runs": [{k: r[k] for k in ROW_KEYS} for r in rows]})


def _run(broker: KafkaBroker | KafkaCluster, keys: int, system: str, workdir: Path,
         log: Any) -> dict[str, Any]:
    bootstrap = broker.bootstrap
    if system == "baton":
        scale = vs_baton.scale_out(bootstrap, broker.pid, keys, workdir, log)
        fail = vs_baton.failover(bootstrap, keys, workdir, log)
    else:
        scale = vs_streams.scale_out(bootstrap, broker.pid, keys, system, workdir, log)
        fail = vs_streams.failover(bootstrap, keys, system, workdir, log)
    result = row(keys, system, scale, fail)
    log(json.dumps({**result, "gaps_ms": scale["gaps_ms"]}))
    return result


def _print_table(rows: list[dict[str, Any]]) -> None:
    print("| keys | system | balanced | pause p99 | failover | rebuilt/s | CPU new / old "
          "| lost | dup | wrong |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cpu = r["cpu_s"]
        print(f"| {r['keys']:,} | {r['system']} ({r['settings']}) | {r['balanced_s']} s "
              f"| {r['pause_ms_p99']} ms | {r['failover_s']} s | {r['rebuilt_per_s']:,} "
              f"| {cpu['new']} / {cpu['old']} s | {r['lost']} | {r['duplicated']} "
              f"| {r['wrong']} |")
        for example in r["examples"]:
            print(f"  {r['settings']}: {example}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def log(text: str) -> None:
        print(f"# {text}", file=sys.stderr, flush=True)

    if any(s != "baton" for s in args.systems):
        vs_streams.ensure_peer(log)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="baton-vs-ks-") as tmp, \
            (KafkaCluster if args.broker == "kafka3" else KafkaBroker)(Path(tmp) / "broker") \
            as broker:
        log(f"{args.broker}: Apache Kafka on {broker.bootstrap}")
        try:
            for keys in args.keys:
                for system in [s for s in SYSTEMS if s in args.systems]:
                    rows.append(_run(broker, keys, system, Path(tmp), log))
        finally:
            if args.logs is not None:
                shutil.copytree(tmp, args.logs, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("state", "log", "*.sst"))
    if args.json:
        print(to_json(rows))
    else:
        _print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
