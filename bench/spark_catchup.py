"""Benchmark: a warmup's catch-up through the consumer path vs the Spark bulk path.

One backlog (N records, K keys, running sums, keyed over P partitions) is produced once,
then caught up four ways on the same data in the same run:

1. raw read: the bulk path's reader alone (confluent-kafka consume, nothing else);
2. consumer path: per-record `process()` into a TaskStore, commits every --commit-every;
3. Spark on local[1] and 4. on local[2]: `bulk_catch_up` + `ingest_bulk`.

It prints records/s, spark per core / consumer, local[2] / local[1], where the time goes,
and checks that every store holds the same bytes.

    .venv/bin/python bench/spark_catchup.py                      # 5,000,000 / 1,000,000
    .venv/bin/python bench/spark_catchup.py --records 1000000 --keys 200000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.embedded import EMBEDDED_CLIENT_SETTINGS, EmbeddedBroker
from processor.bulk import bulk_catch_up, ingest_bulk, load_job, read_range
from processor.job import Record
from processor.spark import spark_session, startup_seconds, stop_spark
from store import TaskStore

__all__ = ["main"]

JOB = "processor.examples:RunningSum"
TOPIC = "bench-events"


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--commit-every", type=int, default=10_000,
                        help="consumer path: records per store commit")
    parser.add_argument("--masters", default="local[1],local[2]")
    parser.add_argument("--bootstrap", help="an existing broker (default: embedded noida-db)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    return parser.parse_args(argv)


def _produce(settings: dict[str, Any], records: int, keys: int, partitions: int
             ) -> dict[str, tuple[int, int]]:
    admin = AdminClient({"bootstrap.servers": settings["bootstrap.servers"]})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(60)
    producer = Producer({"bootstrap.servers": settings["bootstrap.servers"], "linger.ms": 50,
                         "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000})
    produce = producer.produce
    for i in range(records):
        key = b"k%07d" % ((i * 7919) % keys)
        while True:
            try:
                produce(TOPIC, key=key, value=b"%d" % (i % 9 + 1),
                        partition=zlib.crc32(key) % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0, "produce did not complete"
    consumer = Consumer({**settings, "group.id": "bench"})
    try:
        return {f"{TOPIC}:{p}": (0, consumer.get_watermark_offsets(
            TopicPartition(TOPIC, p), timeout=30, cached=False)[1]) for p in range(partitions)}
    finally:
        consumer.close()


def _raw_read(settings: dict[str, Any], ranges: dict[str, tuple[int, int]]) -> dict[str, float]:
    began, count = time.perf_counter(), 0
    for name, (lo, hi) in ranges.items():
        topic, _, p = name.rpartition(":")
        for msg in read_range(settings, topic, int(p), lo, hi):
            msg.key(), msg.value()
            count += 1
    return {"records": count, "seconds": time.perf_counter() - began}


def _consumer_messages(settings: dict[str, Any], ranges: dict[str, tuple[int, int]]
                       ) -> Iterator[Any]:
    """All ranges assigned together, as a warmup's consumer reads them."""
    consumer = Consumer({**settings, "group.id": "bench-consumer", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    left = {name: hi for name, (lo, hi) in ranges.items() if hi > lo}
    consumer.assign([TopicPartition(n.rpartition(":")[0], int(n.rpartition(":")[2]), lo)
                     for n, (lo, _) in ranges.items()])
    try:
        while left:
            for msg in consumer.consume(10_000, 1.0):
                name = f"{msg.topic()}:{msg.partition()}"
                if msg.offset() < left.get(name, -1):
                    yield msg
                    if msg.offset() + 1 >= left[name]:
                        del left[name]
    finally:
        consumer.close()


def _consumer_path(settings: dict[str, Any], ranges: dict[str, tuple[int, int]], path: Path,
                   commit_every: int) -> dict[str, float]:
    job = load_job(JOB)()
    store = TaskStore(path)
    began = time.perf_counter()
    applied: dict[str, int] = {}
    count = 0
    for msg in _consumer_messages(settings, ranges):
        record = Record(msg.key(), msg.value(), msg.topic(), msg.partition(), msg.offset(),
                        msg.timestamp()[1])
        for _ in job.process(record, store):
            pass
        applied[f"{msg.topic()}:{msg.partition()}"] = msg.offset() + 1
        count += 1
        if count % commit_every == 0:
            store.commit(applied)
    store.commit({name: hi for name, (_, hi) in ranges.items()})
    seconds = time.perf_counter() - began
    store.close()
    return {"records": count, "seconds": seconds}


def _spark_path(master: str, settings: dict[str, Any], ranges: dict[str, tuple[int, int]],
                path: Path) -> dict[str, Any]:
    stop_spark()
    spark = spark_session(master, "baton-bench")
    result = bulk_catch_up(spark, JOB, settings, ranges, "input", "bench")
    store = TaskStore(path)
    try:
        ingest_bulk(store, result)
    finally:
        store.close()
    timings = result.timings
    seconds = timings["total"] + timings["ingest"]
    return {"records": result.records, "seconds": seconds, "session_start": startup_seconds(),
            "files": len(result.sst_paths), "keys": result.keys, **timings}


def _raw_store(path: Path) -> Iterator[tuple[bytes, bytes]]:
    import rocksdict

    db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True),
                         access_type=rocksdict.AccessType.read_only())
    try:
        yield from db.items()
    finally:
        db.close()


def _same(a: Path, b: Path) -> bool:
    return all(x == y for x, y in zip(_raw_store(a), _raw_store(b), strict=True))


def _report(figures: dict[str, Any], records: int) -> None:
    def rate(name: str) -> float:
        return float(figures[name]["records"] / figures[name]["seconds"])

    print(f"\n{'path':<22}{'records/s':>12}{'seconds':>10}")
    for name, row in figures.items():
        if isinstance(row, dict) and "seconds" in row:
            print(f"{name:<22}{rate(name):>12,.0f}{row['seconds']:>10.1f}")
    consumer = rate("consumer path")
    for name, row in figures.items():
        if name.startswith("spark "):
            cores = int(name.split("[")[1].rstrip("]"))
            print(f"\n{name}: per core {rate(name) / cores:,.0f} records/s = "
                  f"{rate(name) / cores / consumer:.2f}x consumer; session start "
                  f"{row['session_start']:.1f}s (not counted); {row['files']} SST files, "
                  f"{row['keys']:,} keys")
            print(f"  wall: spark jobs {row['spark']:.1f}s, fetch files {row['fetch']:.1f}s, "
                  f"ingest {row['ingest']:.1f}s")
            print(f"  executor task seconds: read+group {row.get('read', 0):.1f}, fold "
                  f"{row.get('fold', 0):.1f}, SST write {row.get('write', 0):.1f}; the rest "
                  f"of {row['spark'] * cores:.1f} core-seconds is shuffle, pickling, "
                  "scheduling")
    if "spark local[1]" in figures and "spark local[2]" in figures:
        print(f"\nlocal[2] / local[1] = {rate('spark local[2]') / rate('spark local[1]'):.2f}")
    print(f"stores identical: {figures['identical']}")


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    broker = None
    if args.bootstrap:
        settings: dict[str, Any] = {"bootstrap.servers": args.bootstrap}
    else:
        broker = EmbeddedBroker()
        settings = {"bootstrap.servers": broker.start(), **EMBEDDED_CLIENT_SETTINGS}
    try:
        with tempfile.TemporaryDirectory(prefix="baton-bench-") as tmp:
            began = time.perf_counter()
            ranges = _produce(settings, args.records, args.keys, args.partitions)
            print(f"produced {args.records:,} records, {args.keys:,} keys, {args.partitions} "
                  f"partitions in {time.perf_counter() - began:.1f}s", file=sys.stderr)
            figures: dict[str, Any] = {"raw read": _raw_read(settings, ranges)}
            figures["consumer path"] = _consumer_path(settings, ranges, Path(tmp) / "consumer",
                                                      args.commit_every)
            for master in args.masters.split(","):
                figures[f"spark {master}"] = _spark_path(master, settings, ranges,
                                                         Path(tmp) / master)
            stop_spark()
            figures["identical"] = all(_same(Path(tmp) / "consumer", Path(tmp) / m)
                                       for m in args.masters.split(","))
            _report(figures, args.records)
            if args.json:
                print(json.dumps(figures))
    finally:
        if broker is not None:
            broker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
