"""Failover with and without a hot standby (issue 12): a script, not a test.

For each state size in --keys: one task (one input partition) holding that many keys,
`catch_up.source = "changelog"`, a coordinator and two processors, live traffic over
the keys. p1 owns the task; p2 either keeps a hot standby of it (`num_standbys = 1`:
it applies the changelog as p1 writes it) or holds nothing (`num_standbys = 0`). p1
is SIGKILLed; the figure is the time from the SIGKILL to the first output p2 commits
on the task, read from the output topic (`read_committed`). With a standby that is the
heartbeat timeout plus a short apply; without one, p2 rebuilds the whole store from
the changelog first, so it grows with the state.

Target (issue 12): with a standby, 1,000,000 keys within 1.5x of 10,000 keys.

    PYTHONPATH=. .venv/bin/python bench/standby_failover.py [--keys 10000 1000000]
        [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.demo import _Cluster, _committed_all, _make_config
from orchestrator.devkit.embedded import EmbeddedBroker
from orchestrator.wire.client import CoordinatorClient
from orchestrator.wire.config import dump_config
from orchestrator.wire.token import read_token

RATE = 500.0                     # live records per second during the failover
TIMEOUT_MS = 2000                # coordinator.processor_timeout_ms: detection time


def _produce(bootstrap: str, topic: str, keys: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1_000_000})
    for i in range(start, start + keys):
        while True:
            try:
                producer.produce(topic, key=f"key-{i}".encode(), value=b"1", partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(300)


class _Traffic:
    """A steady trickle over the state's keys, so the new owner has work at once."""

    def __init__(self, bootstrap: str, topic: str, keys: int) -> None:
        import threading

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.keys, self.sent = topic, keys, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            while self.sent < int((time.monotonic() - started) * RATE):
                key = f"key-{self.sent * 7919 % self.keys}".encode()
                self.producer.produce(self.topic, key=key, value=b"1", partition=0)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.005)
        self.producer.flush(30)

    def start(self) -> _Traffic:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


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


def _config(workdir: Path, bootstrap: str, standbys: int) -> Path:
    path = _make_config(workdir, bootstrap, ("events", "sums"))
    raw = tomllib.loads(path.read_text())
    raw["catch_up"].update({"source": "changelog", "num_standbys": standbys})
    raw["coordinator"]["processor_timeout_ms"] = TIMEOUT_MS
    path.write_text(dump_config(raw))
    return path


def _wait(what: str, done: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


def run(keys: int, standbys: int, log: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="baton-failover-") as tmp, \
            EmbeddedBroker() as broker:
        workdir = Path(tmp)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("events", 1, 1),
                                           NewTopic("sums", 1, 1)]).values():
            future.result(30)
        config = _config(workdir, broker.bootstrap, standbys)
        listen = tomllib.loads(config.read_text())["coordinator"]["listen"]
        _produce(broker.bootstrap, "events", keys)
        cluster = _Cluster(workdir, config, log)
        try:
            cluster.start("coordinator", "coordinator")
            _wait("token", (workdir / "coordinator.token").exists, 60)
            token = read_token(workdir / "coordinator.token")
            client = CoordinatorClient(f"http://{listen}", token)
            cluster.start("p1", "processor", "--id", "p1")
            _wait("p1 processed the state", lambda: _committed_all(
                broker.bootstrap, "events", "baton.demo")[0] >= keys, 600)
            cluster.start("p2", "processor", "--id", "p2")
            _wait("p2 registered", lambda: len(client.status()["processors"]) == 2, 60)
            if standbys:
                metrics = f"http://{listen}/metrics"
                _wait("p2's standby caught up", lambda: _standby_lag(metrics) == 0, 600)
            traffic = _Traffic(broker.bootstrap, "events", keys).start()
            time.sleep(2)
            killed = time.time()
            cluster.procs.pop("p1").kill()
            first = _first_output_after(broker.bootstrap, "sums", int(killed * 1000), 600)
            traffic.stop()
        finally:
            cluster.stop_all()
    return {"keys": keys, "standbys": standbys, "failover_s": round(first - killed, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    def log(text: str) -> None:
        print(f"# {text}", file=sys.stderr, flush=True)

    rows = [run(keys, standbys, log) for keys in args.keys for standbys in (1, 0)]
    by = {(r["keys"], r["standbys"]): r["failover_s"] for r in rows}
    small, large = min(args.keys), max(args.keys)
    summary = {"rows": rows,
               "standby_ratio_largest_to_smallest": round(by[large, 1] / by[small, 1], 2)}
    if args.json:
        print(json.dumps(summary))
        return 0
    for r in rows:
        print(f"{r['keys']:>9} keys, {'with' if r['standbys'] else 'without'} a standby: "
              f"SIGKILL -> first output of the new owner {r['failover_s']} s")
    print(f"with a standby, {large} keys / {small} keys = "
          f"{summary['standby_ratio_largest_to_smallest']}x (target <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
