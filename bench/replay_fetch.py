"""A backlog replay with librdkafka's default fetch sizes (a script, not a test).

The embedded profile raises `receive.message.max.bytes` to 1,000,000,000 for every
client (orchestrator/devkit/embedded.py): noida-db answers a fetch with the partition's
whole backlog whatever fetch.max.bytes says, and librdkafka refuses a reply larger than
receive.message.max.bytes. This script writes --records records (one per key, 4
partitions) to a fresh broker (`--broker`: Apache Kafka by default, or the embedded
noida-db) and replays them from offset 0 with a read_committed consumer polled as a
warmup's (batches of 10,000), once with librdkafka's defaults and once with the
embedded profile's client settings: records/s of each, and defaults / profile. A replay
that makes no progress for --stall seconds is reported as stalled, with the records it
got.

    .venv/bin/python bench/replay_fetch.py [--records 1000000] [--broker kafka|embedded]
        [--json]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
import zlib
from typing import Any

from _common import broker_option, log, preload, report, start_broker
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.embedded import EMBEDDED_CLIENT_SETTINGS

PARTITIONS = 4


def _partition_of(key: bytes) -> int:
    return zlib.crc32(key) % PARTITIONS


def replay(bootstrap: str, topic: str, records: int, extra: dict[str, Any],
           stall_s: float) -> dict[str, Any]:
    """Seconds to read `records` records of `topic` from offset 0 (or the stall)."""
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
                "profile": replay(broker.bootstrap, topic, args.records,
                                  dict(EMBEDDED_CLIENT_SETTINGS), args.stall)}
    ratio = (round(rows["defaults"]["records_per_s"] / rows["profile"]["records_per_s"], 2)
             if rows["defaults"]["records_per_s"] and rows["profile"]["records_per_s"]
             else None)
    summary = {"broker": args.broker, "records": args.records, **rows,
               "defaults_to_profile": ratio}
    lines = [f"broker: {args.broker}"] + [
        f"{name:>8}: {'STALLED after ' if row['stalled'] else ''}{row['records']:,} records "
        f"in {row['seconds']} s" + (f", {row['records_per_s']:,}/s" if row["records_per_s"]
                                    else "") for name, row in rows.items()]
    lines.append(f"librdkafka defaults / receive.message.max.bytes 1e9: {ratio}")
    report(summary, args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
