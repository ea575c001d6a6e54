"""A backlog replay with librdkafka's default fetch sizes (a script, not a test).

The embedded profile raises `receive.message.max.bytes` to 1,000,000,000 for every
client (orchestrator/devkit/embedded.py): noida-db answers a fetch with the partition's
whole backlog whatever fetch.max.bytes says, and librdkafka refuses a reply larger than
receive.message.max.bytes. This script writes --records records (one per key, 4
partitions) to a fresh broker (`--broker`: Apache Kafka by default, or the embedded
noida-db) and replays them from offset 0 with a read_committed consumer polled as a
warmup's (batches of 10,000): with librdkafka's defaults; with a processor's
consumers' settings (processor/runtime/consumers.py: their pace, FETCH_PACE, and the
bounds on what they fetch ahead, FETCH_BOUNDS), and with that pace alone; and with the
embedded profile's client settings. For each: records/s, and how far the script's RSS
rose above its start while the replay ran (sampled every 50 ms, after glibc gave back
what it could before the replay); then defaults / profile, and the processor's
settings against its pace alone. A replay that makes no progress for --stall
seconds is reported as stalled, with the records it got.

    .venv/bin/python bench/replay_fetch.py [--records 1000000] [--broker kafka|embedded]
        [--json]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
import zlib
from typing import Any

from _common import broker_option, log, preload, report, rss_mb, start_broker
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.embedded import EMBEDDED_CLIENT_SETTINGS
from orchestrator.wire import c_heap
from processor.runtime.consumers import FETCH_BOUNDS, FETCH_PACE

PARTITIONS = 4


def _partition_of(key: bytes) -> int:
    return zlib.crc32(key) % PARTITIONS


class _Peak:
    """The highest RSS seen while it runs, sampled on a thread of its own."""

    def __init__(self) -> None:
        c_heap.trim()               # what an earlier replay freed is not counted here
        self.start = self.peak = rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_mb())

    def rise(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.peak - self.start, 1)


def replay(bootstrap: str, topic: str, records: int, extra: dict[str, Any],
           stall_s: float) -> dict[str, Any]:
    """Seconds to read `records` records of `topic` from offset 0 (or the stall), and
    the RSS it took ("rss_rise_mb")."""
    peak = _Peak()
    row = _replay(bootstrap, topic, records, extra, stall_s)
    return {**row, "rss_rise_mb": peak.rise()}


def _replay(bootstrap: str, topic: str, records: int, extra: dict[str, Any],
            stall_s: float) -> dict[str, Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"replay-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         **extra})
    try:
        started = last = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        count = 0
        while count < records:
            got = sum(1 for m in consumer.consume(10_000, 0.1) if not m.error())
            now = time.perf_counter()
            if got:
                count, last = count + got, now
            elif now - last > stall_s:
                return {"records": count, "seconds": round(now - started, 2),
                        "records_per_s": None, "stalled": True}
        seconds = time.perf_counter() - started
        return {"records": count, "seconds": round(seconds, 2),
                "records_per_s": round(count / seconds), "stalled": False}
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--stall", type=float, default=30.0)
    broker_option(parser)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    topic = f"replay-{uuid.uuid4().hex[:8]}"
    with start_broker(args.broker) as broker:
        admin = AdminClient(broker.settings())
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        preload(broker.bootstrap, topic, args.records, _partition_of)
        log(f"{args.records:,} records written")
        rows = {"defaults": replay(broker.bootstrap, topic, args.records, {}, args.stall),
                "processor": replay(broker.bootstrap, topic, args.records,
                                    {**FETCH_BOUNDS, **FETCH_PACE}, args.stall),
                "unbounded": replay(broker.bootstrap, topic, args.records,
                                    dict(FETCH_PACE), args.stall),
                "profile": replay(broker.bootstrap, topic, args.records,
                                  dict(EMBEDDED_CLIENT_SETTINGS), args.stall)}
    ratio = _ratio(rows["defaults"], rows["profile"])
    bounded = _ratio(rows["processor"], rows["unbounded"])
    summary = {"broker": args.broker, "records": args.records, **rows,
               "defaults_to_profile": ratio, "bounded_to_unbounded": bounded}
    lines = [f"broker: {args.broker}"] + [
        f"{name:>9}: {'STALLED after ' if row['stalled'] else ''}{row['records']:,} records "
        f"in {row['seconds']} s" + (f", {row['records_per_s']:,}/s" if row["records_per_s"]
                                    else "") + f", RSS +{row['rss_rise_mb']} MB"
        for name, row in rows.items()]
    lines.append(f"librdkafka defaults / receive.message.max.bytes 1e9: {ratio}")
    lines.append(f"a processor's settings / its pace without the bounds: {bounded} (records/s)")
    report(summary, args.json, lines)
    return 0


def _ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """a's records/s over b's; None when either stalled."""
    if not a["records_per_s"] or not b["records_per_s"]:
        return None
    return round(float(a["records_per_s"]) / float(b["records_per_s"]), 2)


if __name__ == "__main__":
    sys.exit(main())
