"""What an idle consumer costs against the broker (a script, not a test).

One consumer assigned to --partitions empty partitions, polled as a processor's active
consumer is (consume(5000, 10 ms) in a loop) for --seconds, at each fetch.wait.max.ms
given: the CPU it uses (this process: its librdkafka threads and the loop) and the
broker's (the embedded noida-db's process; unknown for --bootstrap), and the Fetch
requests a second it sends (librdkafka's fetch debug lines).

A broker that parks an empty fetch for fetch.wait.max.ms (Apache Kafka does) costs an
idle consumer almost nothing. noida-db 0.2.3 answers at once, and librdkafka has no
back-off for an empty answer, so every idle consumer spins: measured, ~0.3-0.5
core in the client and ~0.25-0.4 core in the broker, whatever fetch.wait.max.ms is.
On a two-core machine two idle processors take most of it (`processor.idle_fetch_backoff_ms`
is the remedy: docs/operations.md, "Brokers without long polls").

    .venv/bin/python bench/idle_consumer.py [--waits 20 500] [--seconds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from typing import Any

from _common import cpu_seconds
from confluent_kafka import OFFSET_END, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.embedded import EMBEDDED_CLIENT_SETTINGS, EmbeddedBroker


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
    parser.add_argument("--bootstrap", help="an existing broker instead of the embedded one")
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
    with EmbeddedBroker() if args.bootstrap is None else _NoBroker(args.bootstrap) as broker:
        extra = dict(EMBEDDED_CLIENT_SETTINGS) if args.bootstrap is None else {}
        topic = f"idle-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
        rows = [idle_cost(broker.bootstrap, extra, broker.pid, topic, args.partitions, wait,
                          args.seconds) for wait in args.waits]
    if args.json:
        print(json.dumps(rows))
        return 0
    for row in rows:
        broker_cores = "?" if row["broker_cores"] is None else f"{row['broker_cores']:.2f}"
        print(f"fetch.wait.max.ms {row['fetch_wait_max_ms']:>4}: "
              f"{row['fetches_per_s']:>7,} fetches/s a partition, "
              f"client {row['client_cores']:.2f} core, broker {broker_cores} core")
    return 0


class _NoBroker:
    """An existing broker: nothing to start or stop, no process to measure."""

    pid: int | None = None

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def __enter__(self) -> _NoBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    sys.exit(main())
