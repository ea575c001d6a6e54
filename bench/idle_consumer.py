"""What an idle consumer costs against the broker (a script, not a test).

One consumer assigned to --partitions empty partitions, polled as a processor's active
consumer is (consume(5000, 10 ms) in a loop) for --seconds, at each fetch.wait.max.ms
given: the CPU it uses (this process: its librdkafka threads and the loop) and the
broker's (its process; unknown for --bootstrap), and the Fetch requests a second it
sends (librdkafka's fetch debug lines). `--broker` picks the broker started: Apache Kafka
(the default) or the embedded noida-db.

With `--processor-backoffs`, a real idle processor instead: a coordinator and one
processor of the demo job over 4 empty input partitions, for each
`processor.idle_fetch_backoff_ms` given, the cores the processor and the broker use over
--seconds once it is active and idle.

A broker that parks an empty fetch for fetch.wait.max.ms (Apache Kafka does) costs an
idle consumer almost nothing. noida-db 0.2.3 answers at once, and librdkafka has no
back-off for an empty answer, so every idle consumer spins: measured, ~0.3-0.5
core in the client and ~0.25-0.4 core in the broker, whatever fetch.wait.max.ms is.
On a two-core machine two idle processors take most of it (`processor.idle_fetch_backoff_ms`
is the remedy: docs/operations.md, "Brokers without long polls").

    .venv/bin/python bench/idle_consumer.py [--waits 20 500] [--seconds 3] [--json]
        [--broker kafka|embedded] [--processor-backoffs 0 10]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
import tomllib
import uuid
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from _common import (
    BenchBroker,
    CpuWindow,
    broker_option,
    cpu_seconds,
    log,
    start_broker,
    wait_until,
)
from confluent_kafka import OFFSET_END, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.cluster import Cluster
from orchestrator.devkit.demo import make_config
from orchestrator.devkit.embedded import EMBEDDED_CLIENT_SETTINGS
from orchestrator.wire.client import CoordinatorClient
from orchestrator.wire.status import is_balanced
from orchestrator.wire.token import read_token


def _consumer(bootstrap: str, extra: dict[str, Any], wait_ms: int,
              logger: logging.Logger | None = None) -> Consumer:
    settings = {"bootstrap.servers": bootstrap, "group.id": f"idle-{uuid.uuid4().hex}",
                "enable.auto.commit": False, "isolation.level": "read_committed",
                "fetch.wait.max.ms": wait_ms, **extra}
    if logger is None:
        return Consumer(settings)
    return Consumer({**settings, "debug": "fetch"}, logger=logger)


def _poll_for(consumer: Consumer, seconds: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        consumer.consume(5000, 0.01)
    return time.monotonic() - started


class _FetchCounter(logging.Handler):
    """Counts librdkafka's "Fetch topic" debug lines (one per partition a request)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "Fetch topic" in record.getMessage():
            self.count += 1


def idle_cost(bootstrap: str, extra: dict[str, Any], broker_pid: int | None, topic: str,
              partitions: int, wait_ms: int, seconds: float) -> dict[str, Any]:
    """Client and broker cores of one idle consumer; then, in a second run with fetch
    debugging on (which costs CPU itself), the partition fetches it sends a second."""
    parts = [TopicPartition(topic, p, 0) for p in range(partitions)]
    consumer = _consumer(bootstrap, extra, wait_ms)
    try:
        consumer.assign(parts)
        consumer.consume(1, 1.0)                     # connected, fetching
        client0, broker0 = time.process_time(), cpu_seconds(broker_pid)
        elapsed = _poll_for(consumer, seconds)
        client = (time.process_time() - client0) / elapsed
        broker = (cpu_seconds(broker_pid) - broker0) / elapsed if broker_pid else None
    finally:
        consumer.close()
    counter = _FetchCounter()
    logger = logging.getLogger(f"idle-{uuid.uuid4().hex[:6]}")
    logger.addHandler(counter)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    consumer = _consumer(bootstrap, extra, wait_ms, logger)
    try:
        consumer.assign(parts)
        consumer.consume(1, 1.0)
        counter.count = 0
        counted_for = _poll_for(consumer, 1.0)
        rate = counter.count / counted_for / partitions
    finally:
        consumer.close()
    return {"fetch_wait_max_ms": wait_ms, "client_cores": round(client, 3),
            "broker_cores": None if broker is None else round(broker, 3),
            "fetches_per_s": round(rate)}


def idle_processor(broker: BenchBroker, backoff_ms: int, seconds: float) -> dict[str, Any]:
    """Cores an idle processor (and the broker) uses with `processor.idle_fetch_backoff_ms
    = backoff_ms`: a coordinator and one processor of the demo job, no input."""
    tag = uuid.uuid4().hex[:8]
    topics = (f"idle-in-{tag}", f"idle-out-{tag}")
    admin = AdminClient(broker.settings())
    for future in admin.create_topics([NewTopic(t, 4, 1) for t in topics]).values():
        future.result(30)
    daemon = {**broker.daemon,
              "processor": {**broker.daemon.get("processor", {}),
                            "idle_fetch_backoff_ms": backoff_ms}}
    with tempfile.TemporaryDirectory(prefix="baton-idle-") as tmp:
        workdir = Path(tmp)
        config = make_config(workdir, broker.bootstrap, topics, daemon)
        raw = tomllib.loads(config.read_text())
        cluster = Cluster(workdir, config, log)
        try:
            cluster.start("coordinator", "coordinator")
            wait_until("the coordinator's token", (workdir / "coordinator.token").exists, 120)
            client = CoordinatorClient(raw["coordinator"]["url"],
                                       read_token(workdir / "coordinator.token"))
            cluster.start("p1", "processor", "--id", "p1")
            wait_until("p1 active", lambda: _active(client), 300, 0.5)
            time.sleep(2.0)                 # past the start's own work
            window = CpuWindow({"processor": cluster.procs["p1"].pid,
                                "broker": broker.pid}).start()
            started = time.monotonic()
            time.sleep(seconds)
            spent, elapsed = window.stop(), time.monotonic() - started
        finally:
            cluster.stop_all()
    return {"idle_fetch_backoff_ms": backoff_ms,
            "processor_cores": round(spent["processor"] / elapsed, 3),
            "broker_cores": round(spent["broker"] / elapsed, 3) if broker.pid else None}


def _active(client: CoordinatorClient) -> bool:
    status = client.status()
    return is_balanced(status) and any(p["active"] for p in status["processors"])


def spin(bootstrap: str, extra: dict[str, Any], topic: str, partitions: int,
         seconds: float) -> None:
    """Be an idle processor's active consumer for `seconds`: assigned to the end of
    `topic`'s partitions, polled as the runtime polls (bench/join_catchup.py runs the
    catch-up alone beside it, to show what an idle processor costs on this broker)."""
    consumer = _consumer(bootstrap, extra, 20)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
        _poll_for(consumer, seconds)
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--waits", type=int, nargs="+", default=[20, 500])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--bootstrap", help="an existing broker instead of starting one")
    broker_option(parser)
    parser.add_argument("--processor-backoffs", type=int, nargs="+", metavar="MS",
                        help="measure an idle processor at each idle_fetch_backoff_ms")
    parser.add_argument("--spin", metavar="TOPIC",
                        help="only be an idle consumer of TOPIC's end for --seconds "
                             "(with --bootstrap)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.spin:
        if args.bootstrap is None:
            parser.error("--spin needs --bootstrap")
        spin(args.bootstrap, dict(EMBEDDED_CLIENT_SETTINGS), args.spin, args.partitions,
             args.seconds)
        return 0
    name = "external" if args.bootstrap else args.broker
    started: AbstractContextManager[BenchBroker] = (
        start_broker(args.broker) if args.bootstrap is None else _NoBroker(args.bootstrap))
    with started as broker:
        if args.processor_backoffs:
            rows = [idle_processor(broker, ms, args.seconds) for ms in args.processor_backoffs]
        else:
            topic = f"idle-{uuid.uuid4().hex[:8]}"
            admin = AdminClient(broker.settings())
            admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
            rows = [idle_cost(broker.bootstrap, broker.client, broker.pid, topic,
                              args.partitions, wait, args.seconds) for wait in args.waits]
    if args.json:
        print(json.dumps({"broker": name, "rows": rows}))
        return 0
    print(f"broker: {name}")
    if args.processor_backoffs:
        for row in rows:
            broker_cores = "?" if row["broker_cores"] is None else f"{row['broker_cores']:.3f}"
            print(f"idle processor, idle_fetch_backoff_ms {row['idle_fetch_backoff_ms']:>3}: "
                  f"processor {row['processor_cores']:.3f} core, broker {broker_cores} core")
        return 0
    for row in rows:
        broker_cores = "?" if row["broker_cores"] is None else f"{row['broker_cores']:.2f}"
        print(f"fetch.wait.max.ms {row['fetch_wait_max_ms']:>4}: "
              f"{row['fetches_per_s']:>7,} fetches/s a partition, "
              f"client {row['client_cores']:.2f} core, broker {broker_cores} core")
    return 0


class _NoBroker(AbstractContextManager[BenchBroker]):
    """An existing broker: nothing to start or stop, no process to measure, Apache
    Kafka's profile (no settings of its own)."""

    def __init__(self, bootstrap: str) -> None:
        self.broker = BenchBroker("external", bootstrap, None)

    def __enter__(self) -> BenchBroker:
        return self.broker

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    sys.exit(main())
