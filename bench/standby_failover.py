"""Failover with and without a hot standby: a script, not a test.

For each state size in --keys, on a fresh broker (`--broker`: Apache Kafka by default,
or the embedded noida-db; the ratio compares sizes on that one): one task (one input
partition) holding that many keys,
`catch_up.source = "changelog"`, a coordinator and two processors, live traffic over
the keys. p1 owns the task; p2 either keeps a hot standby of it (`num_standbys = 1`:
it applies the changelog as p1 writes it) or holds nothing (`num_standbys = 0`). p1
is SIGKILLed; the figure is the time from the SIGKILL to the first output p2 commits
on the task, read from the output topic (`read_committed`). With a standby that is the
heartbeat timeout plus a short apply; without one, p2 rebuilds the whole store from
the changelog first, so it grows with the state.

Target: with a standby, 1,000,000 keys within 1.5x of 10,000 keys.

    PYTHONPATH=. .venv/bin/python bench/standby_failover.py [--keys 10000 1000000]
        [--broker kafka|embedded] [--json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

from _common import (
    BenchBroker,
    Traffic,
    broker_option,
    log,
    preload,
    report,
    start_broker,
    wait_until,
)
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.cluster import Cluster, committed_all
from orchestrator.devkit.demo import make_config
from orchestrator.devkit.settings_report import changed_settings
from orchestrator.wire.client import CoordinatorClient
from orchestrator.wire.config import dump_config
from orchestrator.wire.token import read_token

RATE = 500.0                     # live records per second during the failover
TIMEOUT_MS = 2000                # coordinator.processor_timeout_ms: detection time


def _one_partition(key: bytes) -> int:
    return 0                     # the one task's one input partition


def _first_output_after(bootstrap: str, topic: str, after_ms: int, timeout: float) -> float:
    """The CreateTime (s) of the first committed output produced after `after_ms`.

    Each look reads the topic from its beginning with a new consumer: noida-db's
    `read_committed` fetch that starts mid-partition can drop records, and a reader that
    went on from where the dead owner's open transaction held the stable offset missed
    the new owner's outputs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        later = [s for s in _committed_stamps(bootstrap, topic) if s > after_ms]
        if later:
            return min(later) / 1000
        time.sleep(0.2)
    raise TimeoutError(f"no output after the kill within {timeout:.0f} s")


def _committed_stamps(bootstrap: str, topic: str) -> list[int]:
    """The CreateTime (ms) of every committed record of partition 0, read from offset 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"failover-{time.time()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "receive.message.max.bytes": 1_000_000_000})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        stamps: list[int] = []
        while True:
            batch = [m.timestamp()[1] for m in consumer.consume(100_000, 0.5) if not m.error()]
            if not batch:
                return stamps
            stamps += batch
    finally:
        consumer.close()


def _standby_lag(metrics_url: str) -> int | None:
    """The standby's lag on the task, from the coordinator's /metrics."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("baton_task_lag_records{") and 'role="standby"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return None


def _config(workdir: Path, broker: BenchBroker, standbys: int) -> Path:
    path = make_config(workdir, broker.bootstrap, ("events", "sums"), broker.daemon)
    raw = tomllib.loads(path.read_text())
    raw["catch_up"].update({"source": "changelog", "num_standbys": standbys})
    raw["coordinator"]["processor_timeout_ms"] = TIMEOUT_MS
    path.write_text(dump_config(raw))
    return path


def run(keys: int, standbys: int, log: Any, kind: str = "kafka") -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="baton-failover-") as tmp, \
            start_broker(kind) as broker:
        workdir = Path(tmp)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("events", 1, 1),
                                           NewTopic("sums", 1, 1)]).values():
            future.result(30)
        config = _config(workdir, broker, standbys)
        settings = changed_settings(config)
        listen = tomllib.loads(config.read_text())["coordinator"]["listen"]
        preload(broker.bootstrap, "events", keys, _one_partition)
        cluster = Cluster(workdir, config, log)
        try:
            cluster.start("coordinator", "coordinator")
            wait_until("token", (workdir / "coordinator.token").exists, 60)
            token = read_token(workdir / "coordinator.token")
            client = CoordinatorClient(f"http://{listen}", token)
            cluster.start("p1", "processor", "--id", "p1")
            wait_until("p1 processed the state", lambda: committed_all(
                broker.bootstrap, "events", "baton.demo")[0] >= keys, 600)
            cluster.start("p2", "processor", "--id", "p2")
            wait_until("p2 registered", lambda: len(client.status()["processors"]) == 2, 60)
            if standbys:
                metrics = f"http://{listen}/metrics"
                wait_until("p2's standby caught up", lambda: _standby_lag(metrics) == 0, 600)
            traffic = Traffic(broker.bootstrap, "events", keys, RATE, _one_partition).start()
            time.sleep(2)
            killed = time.time()
            cluster.procs.pop("p1").kill()
            first = _first_output_after(broker.bootstrap, "sums", int(killed * 1000), 600)
            traffic.stop()
        finally:
            cluster.stop_all()
    return {"keys": keys, "standbys": standbys, "failover_s": round(first - killed, 2),
            "settings": settings}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--json", action="store_true")
    broker_option(parser)
    args = parser.parse_args()

    rows = [run(keys, standbys, log, args.broker) for keys in args.keys for standbys in (1, 0)]
    by = {(r["keys"], r["standbys"]): r["failover_s"] for r in rows}
    small, large = min(args.keys), max(args.keys)
    summary = {"broker": args.broker, "rows": rows,
               "standby_ratio_largest_to_smallest": round(by[large, 1] / by[small, 1], 2)}
    lines = [f"broker: {args.broker}"] + [
        f"{r['keys']:>9} keys, {'with' if r['standbys'] else 'without'} a standby: "
        f"SIGKILL -> first output of the new owner {r['failover_s']} s" for r in rows]
    lines.append(f"with a standby, {large} keys / {small} keys = "
                 f"{summary['standby_ratio_largest_to_smallest']}x (target <= 1.5x)")
    report(summary, args.json, lines)
    return 0

if __name__ == "__main__":
    sys.exit(main())
