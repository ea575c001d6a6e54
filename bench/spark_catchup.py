"""Benchmark: a warmup's catch-up through the consumer path vs the Spark bulk path.

One backlog (N records, K keys, running sums, keyed over P partitions) is produced once,
on one broker (`--broker`: Apache Kafka by default, or the embedded noida-db;
--bootstrap: an existing one), then caught up four ways on the same data in the same
run:

1. raw read: the bulk path's reader alone (confluent-kafka consume, nothing else);
2. consumer path: the processor's warmup replay (processor.replica.Replica): per-record
   `process()` into a TaskStore, T2 committed with the state every --commit-every records;
3. Spark on local[1] and 4. on local[2]: `bulk_catch_up` + `ingest_bulk`.

It prints records/s, spark per core / consumer, local[2] / local[1], where the time goes,
and checks that every store holds the same bytes.

    .venv/bin/python bench/spark_catchup.py                      # 5,000,000 / 1,000,000
    .venv/bin/python bench/spark_catchup.py --records 1000000 --keys 200000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _common import broker_name, broker_option, start_broker
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from processor.job import load_job
from processor.replica import Replica
from processor.spark import spark_session, startup_seconds, stop_spark
from processor.spark.bulk import bulk_catch_up
from processor.spark.ingest import ingest_bulk
from processor.spark.reader import read_range
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
    parser.add_argument("--plans", default="auto",
                        help="bulk plans to run on every master: auto, local, shuffle")
    broker_option(parser)
    parser.add_argument("--bootstrap", help="an existing broker instead of starting one")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every path this many times and keep the fastest (a "
                             "shared host's noise only ever slows a run down)")
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


def _cpu_seconds(exclude: set[int]) -> float:
    """CPU seconds used so far by this process and its descendants (the Spark JVM and
    its Python workers), minus the `exclude` trees (the embedded broker). On a shared
    host, records per CPU-second compare paths fairly where wall time cannot."""
    parents: dict[int, list[int]] = {}
    used: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
        used[int(entry)] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid not in exclude:
            total += used.get(pid, 0)
            todo.extend(parents.get(pid, []))
    return total / os.sysconf("SC_CLK_TCK")


class _Measure:
    """Wall and CPU seconds of one path."""

    exclude: set[int] = set()

    def __enter__(self) -> dict[str, float]:
        self.row: dict[str, float] = {}
        self.wall, self.cpu = time.perf_counter(), _cpu_seconds(self.exclude)
        return self.row

    def __exit__(self, *exc: object) -> None:
        self.row["seconds"] = time.perf_counter() - self.wall
        self.row["cpu"] = _cpu_seconds(self.exclude) - self.cpu


def _spin(n: int) -> float:
    began, x = time.perf_counter(), 0
    for i in range(n):
        x += i * i
    return time.perf_counter() - began


def _host_speedup(n: int = 20_000_000) -> float:
    """What two processes gain over one on a trivially parallel loop right now: on a
    shared host, the ceiling of any local[2] / local[1] figure measured beside it."""
    from multiprocessing import Pool

    one = _spin(2 * n)
    with Pool(2) as pool:
        began = time.perf_counter()
        pool.map(_spin, [n, n])
        return one / (time.perf_counter() - began)


def _raw_read(settings: dict[str, Any], ranges: dict[str, tuple[int, int]]) -> dict[str, float]:
    count = 0
    with _Measure() as row:
        for name, (lo, hi) in ranges.items():
            topic, _, p = name.rpartition(":")
            for msg in read_range(settings, topic, int(p), lo, hi):
                msg.key(), msg.value()
                count += 1
    return {**row, "records": count}


def _consumer_path(settings: dict[str, Any], ranges: dict[str, tuple[int, int]], path: Path,
                   commit_every: int) -> dict[str, float]:
    """The processor's own warmup replay (processor.replica.Replica): all ranges assigned
    to one consumer, process() per record into the TaskStore, T2 committed with it."""
    job = load_job(JOB)()
    store = TaskStore(path)
    replica = Replica("bench", list(ranges), job, store, "warmup",
                      {name: lo for name, (lo, _) in ranges.items()},
                      {name: hi for name, (_, hi) in ranges.items()})
    consumer = Consumer({**settings, "group.id": "bench-consumer", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(n.rpartition(":")[0], int(n.rpartition(":")[2]), lo)
                     for n, (lo, _) in ranges.items()])
    uncommitted = 0
    with _Measure() as row:
        while not replica.caught_up():
            batch = consumer.consume(10_000, 0.2)
            replica.apply(batch)
            uncommitted += len(batch)
            if uncommitted >= commit_every:
                replica.commit()
                uncommitted = 0
        replica.commit()
    consumer.close()
    store.close()
    return {**row, "records": replica.applied_total}


def _spark_path(master: str, plan: Any, settings: dict[str, Any],
                ranges: dict[str, tuple[int, int]], path: Path) -> dict[str, Any]:
    stop_spark()  # a new session per run: its start-up is reported, not counted
    spark = spark_session(master, "baton-bench")
    warm = time.perf_counter()  # start the Python workers and import Baton in them
    cores = spark.sparkContext.defaultParallelism
    spark.sparkContext.parallelize(range(cores), cores).foreach(_import_bulk)
    warm = time.perf_counter() - warm
    with _Measure() as row:
        result = bulk_catch_up(spark, JOB, settings, ranges, "input", "bench", plan=plan)
        store = TaskStore(path)
        try:
            ingest_bulk(store, result)
        finally:
            store.close()
    timings = result.timings
    return {**row, "records": result.records, "session_start": startup_seconds(), "warm": warm,
            "files": len(result.sst_paths), "keys": result.keys, "plan": result.plan, **timings}


def _import_bulk(_: object) -> None:
    import processor.spark.bulk  # noqa: F401


def _cores(name: str) -> int:
    return int(name.split("[")[1].split("]")[0])


def _best(times: int, run: Callable[[int], dict[str, Any]]) -> dict[str, Any]:
    """The fastest of `times` runs (by wall time)."""
    return min((run(i) for i in range(max(times, 1))), key=lambda row: float(row["seconds"]))


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


_LABELS = {"replay": "read+process", "read": "read+group", "fold": "fold",
           "write": "SST write"}


def _report(figures: dict[str, Any]) -> None:
    def rate(name: str) -> float:
        return float(figures[name]["records"] / figures[name]["seconds"])

    def per_cpu(name: str) -> float:
        return float(figures[name]["records"] / figures[name]["cpu"])

    print(f"broker: {figures['broker']}")
    print(f"\n{'path':<24}{'records/s':>11}{'wall s':>8}{'CPU s':>8}{'records/CPU-s':>15}")
    for name, row in figures.items():
        if isinstance(row, dict) and "seconds" in row:
            print(f"{name:<24}{rate(name):>11,.0f}{row['seconds']:>8.1f}{row['cpu']:>8.1f}"
                  f"{per_cpu(name):>15,.0f}")
    consumer, consumer_cpu = rate("consumer path"), per_cpu("consumer path")
    for name, row in figures.items():
        if name.startswith("spark "):
            cores = _cores(name)
            print(f"\n{name} ({row['plan']} plan): wall per core {rate(name) / cores:,.0f} "
                  f"records/s = {rate(name) / cores / consumer:.2f}x consumer; per CPU-second "
                  f"{per_cpu(name) / consumer_cpu:.2f}x consumer; {row['files']} SST files, "
                  f"{row['keys']:,} keys")
            print(f"  wall: session start {row['session_start']:.1f}s + Python worker warm-up "
                  f"{row['warm']:.1f}s (not counted), spark "
                  f"jobs {row['spark']:.1f}s, fetch files {row['fetch']:.1f}s, ingest "
                  f"{row['ingest']:.1f}s")
            work = {k: row[k] for k in ("replay", "read", "fold", "write") if k in row}
            print("  executor task CPU seconds: " + ", ".join(
                f"{_LABELS[k]} {v:.1f}" for k, v in work.items()) + f", of {row['cpu']:.1f} "
                "in all; the rest is Spark's: JVM, driver, Python worker I/O, shuffle")
    for plan in ("", " local", " shuffle"):
        one, two = f"spark local[1]{plan}", f"spark local[2]{plan}"
        if one in figures and two in figures:
            print(f"\n{two} / {one} = {rate(two) / rate(one):.2f} (wall)")
    print(f"stores identical: {figures['identical']}; load average {figures['load']}")


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    with ExitStack() as stack:
        broker = None if args.bootstrap else stack.enter_context(start_broker(args.broker))
        settings: dict[str, Any] = (broker.settings() if broker is not None
                                    else {"bootstrap.servers": args.bootstrap})
        with tempfile.TemporaryDirectory(prefix="baton-bench-") as tmp:
            began = time.perf_counter()
            ranges = _produce(settings, args.records, args.keys, args.partitions)
            print(f"produced {args.records:,} records, {args.keys:,} keys, {args.partitions} "
                  f"partitions in {time.perf_counter() - began:.1f}s", file=sys.stderr)
            _Measure.exclude = {broker.pid} if broker is not None and broker.pid else set()
            load = [os.getloadavg()[0]]
            speedups = [_host_speedup()]
            figures: dict[str, Any] = {"broker": broker_name(args.broker, args.bootstrap)}
            figures["raw read"] = _best(args.repeat, lambda i: _raw_read(settings, ranges))
            figures["consumer path"] = _best(args.repeat, lambda i: _consumer_path(
                settings, ranges, Path(tmp) / f"consumer-{i}", args.commit_every))
            runs = [(m, p) for p in args.plans.split(",") for m in args.masters.split(",")]
            for master, plan in runs:
                name = f"spark {master}" + ("" if plan == "auto" else f" {plan}")
                figures[name] = _best(args.repeat, lambda i, m=master, p=plan, n=name: (
                    _spark_path(m, p, settings, ranges, Path(tmp) / f"{n}-{i}")))
            stop_spark()
            stores = sorted(Path(tmp).iterdir())
            figures["identical"] = all(_same(stores[0], other) for other in stores[1:])
            load.append(os.getloadavg()[0])
            speedups.append(_host_speedup())
            figures["load"] = (f"{load[0]:.1f} at start, {load[1]:.1f} at end (2 cores); a "
                               "trivially parallel loop got x" + " and x".join(
                                   f"{s:.2f}" for s in speedups) + " from 2 processes")
            _report(figures)
            if args.json:
                print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
