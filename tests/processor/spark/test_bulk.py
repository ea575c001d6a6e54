"""Spark bulk catch-up against a real broker, real Spark and real RocksDB.

The reference is the consumer path: the same ranges read with a plain confluent-kafka
consumer, one `process()` (or changelog write) per record into a TaskStore, committed
with the offsets; a record whose process() raises is skipped with its writes undone, as
the processor's replica does. Both stores must hold the same bytes, metadata included.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
import rocksdict
from confluent_kafka import Consumer, TopicPartition

from processor.job import Record
from processor.spark import SparkUnavailableError, load_job, spark_session
from processor.spark.bulk import (
    BulkCatchUpError,
    bulk_catch_up,
)
from processor.spark.ingest import ingest_bulk
from store import TaskStore, decode_changelog, decode_value, encode_changelog

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TRAIL = "tests.processor.conftest:Trail"
SUM = "processor.examples:RunningSum"


def _produce_input(broker: Any, topic: str, partitions: int, records: int, keys: int,
                   seed: int, spread: bool = False) -> dict[str, tuple[int, int]]:
    """Keyed records (the default partitioner: a key stays in one partition), or with
    `spread` on random partitions, so a key's records span partitions and chunks."""
    rng = random.Random(seed)
    producer = broker.producer()
    for _ in range(records):
        where = {"partition": rng.randrange(partitions)} if spread else {}
        producer.produce(topic, key=f"k{rng.randrange(keys)}".encode(),
                         value=str(rng.randint(0, 9)).encode(), **where)  # b"0": poison
    assert producer.flush(30) == 0
    return _ranges(broker, topic, partitions)


def _ranges(broker: Any, topic: str, partitions: int) -> dict[str, tuple[int, int]]:
    consumer = Consumer(broker.settings(**{"group.id": "ranges"}))
    try:
        return {f"{topic}:{p}": (0, consumer.get_watermark_offsets(
            TopicPartition(topic, p), timeout=10, cached=False)[1]) for p in range(partitions)}
    finally:
        consumer.close()


def _consumer_path(broker: Any, path: Path, ranges: dict[str, tuple[int, int]], source: str,
                   job_class: str = TRAIL, key_filter: Any = None) -> None:
    """The reference: per-record process() (or changelog write) into a TaskStore."""
    job = load_job(job_class)()
    store = TaskStore(path)
    consumer = Consumer(broker.settings(**{
        "group.id": "reference", "enable.auto.commit": False,
        "isolation.level": "read_committed"}))
    try:
        for name, (start, end) in ranges.items():
            topic, _, number = name.rpartition(":")
            tp = TopicPartition(topic, int(number), start)
            consumer.assign([tp])
            position, deadline = start, time.monotonic() + 30
            while position < end:
                assert time.monotonic() < deadline, f"reference reader stuck on {name}"
                batch = [m for m in consumer.consume(1000, 0.5) if m.offset() < end]
                for msg in batch:
                    assert msg.error() is None, msg.error()
                    if key_filter is None or key_filter(msg.key()):
                        _apply(job, store, source, msg)
                    position = msg.offset() + 1
                    if position % 250 == 0:
                        store.commit({name: position})
                if not batch:
                    position = max(position, consumer.position([tp])[0].offset)
            store.commit({name: end})
    finally:
        consumer.close()
        store.close()


def _apply(job: Any, store: TaskStore, source: str, msg: Any) -> None:
    if source == "changelog":
        key, raw = decode_changelog(msg.key(), msg.value())
        if raw is None:
            store.delete(key)
        else:
            store[key] = decode_value(raw)
        return
    record = Record(msg.key(), msg.value(), msg.topic(), msg.partition(), msg.offset(),
                    msg.timestamp()[1])
    store.begin_record()
    try:
        for _ in job.process(record, store):
            pass
    except ValueError:  # a poison record is skipped, its writes undone
        store.rollback_record()


def _raw(path: Path) -> list[tuple[bytes, bytes]]:
    """Every byte of a closed store: data and metadata (applied offsets)."""
    db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True),
                         access_type=rocksdict.AccessType.read_only())
    try:
        return list(db.items())
    finally:
        db.close()


def _bulk_store(path: Path, result: Any) -> None:
    store = TaskStore(path)
    try:
        ingest_bulk(store, result)
    finally:
        store.close()


def test_local_plan_matches_consumer_path(spark, broker, unique, tmp_path) -> None:
    topic = broker.create_topic(unique("bulk-local"), 3)
    ranges = _produce_input(broker, topic, 3, 3000, 150, seed=1)
    result = bulk_catch_up(spark, TRAIL, broker.settings(), ranges, "input", "Partition 0")
    assert result.plan == "local" and len(result.sst_paths) == 3 and result.records == 3000
    assert 200 < result.skipped < 400  # the poison values, as the consumer path skips them
    assert result.offsets == {name: end for name, (_, end) in ranges.items()}
    _bulk_store(tmp_path / "bulk", result)
    assert not result.directory.exists()
    _consumer_path(broker, tmp_path / "ref", ranges, "input")
    bulk, ref = _raw(tmp_path / "bulk"), _raw(tmp_path / "ref")
    assert len(ref) > 150  # data and the applied offsets
    assert bulk == ref


# A lambda travels to the executors by value (a test module's function would not import).
_even = lambda key: zlib.crc32(key or b"") % 2 == 0  # noqa: E731


@pytest.mark.parametrize("key_filter", [None, _even], ids=["all", "split-filter"])
def test_shuffle_plan_matches_consumer_path(spark, broker, unique, tmp_path, key_filter
                                            ) -> None:
    """Keys span partitions and sub-ranges: their records must still fold in order."""
    topic = broker.create_topic(unique("bulk-shuffle"), 3)
    # no transactions in this input, so sub-ranges read safely on any broker
    ranges = _produce_input(broker, topic, 3, 3000, 150, seed=7, spread=True)
    result = bulk_catch_up(spark, TRAIL, broker.settings(), ranges, "input", "Partition 0",
                           key_filter=key_filter, chunk_records=400, sst_files=3)
    assert result.plan == "shuffle" and len(result.sst_paths) == 3
    assert result.records == 3000
    _bulk_store(tmp_path / "bulk", result)
    _consumer_path(broker, tmp_path / "ref", ranges, "input", key_filter=key_filter)
    assert _raw(tmp_path / "bulk") == _raw(tmp_path / "ref")


def test_local_plan_reruns_as_shuffle_when_keys_span_partitions(spark, broker, unique,
                                                                 tmp_path) -> None:
    topic = broker.create_topic(unique("bulk-spread"), 2)
    ranges = _produce_input(broker, topic, 2, 1000, 50, seed=9, spread=True)
    result = bulk_catch_up(spark, TRAIL, broker.settings(), ranges, "input", "Partition 0")
    assert result.plan.startswith("shuffle (local plan found keys spanning ranges)")
    _bulk_store(tmp_path / "bulk", result)
    _consumer_path(broker, tmp_path / "ref", ranges, "input")
    assert _raw(tmp_path / "bulk") == _raw(tmp_path / "ref")


def test_a_job_with_state_across_keys_is_refused(spark, broker, unique) -> None:
    topic = broker.create_topic(unique("bulk-tally"), 2)
    ranges = _produce_input(broker, topic, 2, 200, 20, seed=2)
    with pytest.raises(BulkCatchUpError, match="several ranges or record keys .*'records'"):
        bulk_catch_up(spark, "tests.processor.conftest:Tally", broker.settings(), ranges,
                      "input", "Partition 0")


def _produce_changelog(broker: Any, topic: str, seed: int) -> None:
    """State writes of str and bytes keys, odd JSON values, deletes, an aborted txn."""
    rng = random.Random(seed)
    keys: list[bytes | str] = [*(f"s{i}" for i in range(40)), *(b"b%d" % i for i in range(40))]
    values = [1, -7, 2**70, "text", None, [1, "two", None], {"a": {"b": [1.5]}}, True]
    producer = broker.producer(**{"transactional.id": unique_id("chg")})
    producer.init_transactions(30)
    for batch in range(6):
        producer.begin_transaction()
        for _ in range(300):
            key = rng.choice(keys)
            value = rng.choice(values) if rng.random() > 0.15 else _DELETE
            raw_key, raw = encode_changelog(key, None if value is _DELETE else value)
            if value is not _DELETE and value is None:
                raw = b"null"  # a stored JSON null, not a delete
            producer.produce(topic, key=raw_key, value=raw, partition=zlib.crc32(raw_key) % 2)
        if batch == 3:
            producer.flush(30)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)


_DELETE = object()


def unique_id(prefix: str) -> str:
    return f"{prefix}-{random.getrandbits(40):x}"


@pytest.mark.parametrize("plan", ["local", "shuffle"])
def test_changelog_source_matches_consumer_path(spark, broker, unique, tmp_path, plan) -> None:
    topic = broker.create_topic(unique("bulk-chg"), 2)
    _produce_changelog(broker, topic, seed=11)
    ranges = _ranges(broker, topic, 2)
    result = bulk_catch_up(spark, TRAIL, broker.settings(), ranges, "changelog", "Partition 1",
                           plan=plan)
    assert result.plan == plan
    assert result.records == 1500  # the aborted transaction's 300 records are skipped
    _bulk_store(tmp_path / "bulk", result)
    _consumer_path(broker, tmp_path / "ref", ranges, "changelog")
    bulk, ref = _raw(tmp_path / "bulk"), _raw(tmp_path / "ref")
    assert len(ref) > 40
    assert bulk == ref
    with TaskStore(tmp_path / "bulk") as store:
        assert store.applied_offsets() == {name: end for name, (_, end) in ranges.items()}
        assert {type(k) for k in store} == {bytes, str}


def test_ingest_is_refused_into_a_store_with_state(spark, broker, unique, tmp_path) -> None:
    topic = broker.create_topic(unique("bulk-busy"), 1)
    result = bulk_catch_up(spark, SUM, broker.settings(), {f"{topic}:0": (0, 0)}, "input", "t")
    with TaskStore(tmp_path / "busy") as store:
        store[b"k"] = 1
        store.commit({f"{topic}:0": 5})
        with pytest.raises(BulkCatchUpError, match="already holds state"):
            ingest_bulk(store, result)
        assert store.applied_offsets() == {f"{topic}:0": 5}


def test_executor_failure_is_retried_then_raised(spark, broker, unique) -> None:
    assert spark.sparkContext.master == "local[2,4]"  # local mode retries tasks too
    topic = broker.create_topic(unique("bulk-bomb"), 1)
    ranges = _produce_input(broker, topic, 1, 10, 2, seed=4)
    with pytest.raises(BulkCatchUpError) as failure:
        bulk_catch_up(spark, "tests.processor.conftest:ExecutorBomb", broker.settings(),
                      ranges, "input", "t")
    message = str(failure.value)
    assert "RuntimeError: boom in an executor" in message
    assert f"{topic}:0 [0, 10)" in message and "after Spark's task retries" in message


def test_a_job_that_cannot_be_imported_is_named(spark, broker) -> None:
    with pytest.raises(BulkCatchUpError, match="nowhere.jobs:Missing"):
        bulk_catch_up(spark, "nowhere.jobs:Missing", broker.settings(), {"t:0": (0, 1)},
                      "input", "t")


def test_unreachable_master_is_named() -> None:
    from orchestrator.devkit.embedded import free_port

    master = f"spark://127.0.0.1:{free_port()}"
    with pytest.raises(SparkUnavailableError, match=f"Spark master {master} is unreachable"):
        spark_session(master)


def test_missing_java_says_to_install_java_17(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SparkUnavailableError, match="install Java 17"):
        spark_session("local[1]")


CLUSTER_DRIVER = r"""
import json, os, sys, time
from pathlib import Path
from processor.spark.bulk import bulk_catch_up
from processor.spark import spark_session, startup_seconds

began = time.monotonic()
args = json.loads(sys.argv[1])
spark = spark_session(args["master"])
print(f"session {time.monotonic() - began:.1f}s", file=sys.stderr)
sc = spark.sparkContext
deadline = time.monotonic() + 60
while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:  # two executors + the driver
    assert time.monotonic() < deadline, "the two workers' executors did not register"
    time.sleep(0.2)

def ancestors(_):
    pids, pid = [], os.getpid()
    while pid > 1:
        pids.append(pid)
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return pids

print(f"executors {time.monotonic() - began:.1f}s", file=sys.stderr)
result = bulk_catch_up(spark, args["job"], args["settings"], args["ranges"], "input",
                       "Partition 0", directory=Path(args["out"]), chunk_records=500)
print(f"bulk {time.monotonic() - began:.1f}s", file=sys.stderr)
lineages = sc.parallelize(range(8), 8).map(ancestors).collect()
print(f"lineage {time.monotonic() - began:.1f}s", file=sys.stderr)
print(json.dumps({"paths": [str(p) for p in result.sst_paths], "offsets": result.offsets,
                  "records": result.records, "lineages": lineages, "driver": os.getpid(),
                  "startup_s": startup_seconds()}))
spark.stop()
"""


def test_bulk_on_a_standalone_cluster(broker, unique, tmp_path, standalone_cluster) -> None:
    topic = broker.create_topic(unique("bulk-cluster"), 2)
    ranges = _produce_input(broker, topic, 2, 2000, 100, seed=3)
    out = tmp_path / "driver-files"
    args = {"master": standalone_cluster.master, "job": TRAIL, "settings": broker.settings(),
            "ranges": ranges, "out": str(out)}
    run = subprocess.run([sys.executable, "-c", CLUSTER_DRIVER, json.dumps(args)],
                         env=standalone_cluster.env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=240, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["records"] == 2000
    assert report["offsets"] == {name: end for name, (_, end) in ranges.items()}
    workers = set(standalone_cluster.pids[1:])
    for lineage in report["lineages"]:  # Python workers under a worker's executor JVM
        assert report["driver"] not in lineage and workers & set(lineage), lineage
    paths = [Path(p) for p in report["paths"]]
    assert paths and all(p.parent == out for p in paths)
    store = TaskStore(tmp_path / "bulk")
    try:
        store.ingest(paths)
    finally:
        store.close()
    _consumer_path(broker, tmp_path / "ref", ranges, "input")
    assert _raw(tmp_path / "bulk") == _raw(tmp_path / "ref")
