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
import zlib
from pathlib import Path
from typing import Any

import pytest

from processor.spark import SparkUnavailableError, spark_session
from processor.spark.bulk import (
    BulkCatchUpError,
    bulk_catch_up,
)
from processor.spark.ingest import ingest_bulk
from store import TaskStore, encode_changelog
from tests.processor.spark.bulk_support import (
    TRAIL,
    consumer_path,
    input_ranges,
    produce_input,
    store_bytes,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SUM = "processor.examples:RunningSum"


def _bulk_store(path: Path, result: Any) -> None:
    store = TaskStore(path)
    try:
        ingest_bulk(store, result)
    finally:
        store.close()


def test_local_plan_matches_consumer_path(spark, broker, unique, tmp_path) -> None:
    topic = broker.create_topic(unique("bulk-local"), 3)
    ranges = produce_input(broker, topic, 3, 3000, 150, seed=1)
    result = bulk_catch_up(spark, TRAIL, broker.settings(), ranges, "input", "Partition 0")
    assert result.plan == "local" and len(result.sst_paths) == 3 and result.records == 3000
    assert 200 < result.skipped < 400  # the poison values, as the consumer path skips them
    assert result.offsets == {name: end for name, (_, end) in ranges.items()}
    _bulk_store(tmp_path / "bulk", result)
    assert not result.directory.exists()
    consumer_path(broker, tmp_path / "ref", ranges, "input")
    bulk, ref = store_bytes(tmp_path / "bulk"), store_bytes(tmp_path / "ref")
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
    ranges = produce_input(broker, topic, 3, 3000, 150, seed=7, spread=True)
    result = bulk_catch_up(spark, TRAIL, broker.settings(), ranges, "input", "Partition 0",
                           key_filter=key_filter, chunk_records=400, sst_files=3)
    assert result.plan == "shuffle" and len(result.sst_paths) == 3
    assert result.records == 3000
    _bulk_store(tmp_path / "bulk", result)
    consumer_path(broker, tmp_path / "ref", ranges, "input", key_filter=key_filter)
    assert store_bytes(tmp_path / "bulk") == store_bytes(tmp_path / "ref")


def test_local_plan_reruns_as_shuffle_when_keys_span_partitions(spark, broker, unique,
                                                                 tmp_path) -> None:
    topic = broker.create_topic(unique("bulk-spread"), 2)
    ranges = produce_input(broker, topic, 2, 1000, 50, seed=9, spread=True)
    result = bulk_catch_up(spark, TRAIL, broker.settings(), ranges, "input", "Partition 0")
    assert result.plan.startswith("shuffle (local plan found keys spanning ranges)")
    _bulk_store(tmp_path / "bulk", result)
    consumer_path(broker, tmp_path / "ref", ranges, "input")
    assert store_bytes(tmp_path / "bulk") == store_bytes(tmp_path / "ref")


def test_a_job_with_state_across_keys_is_refused(spark, broker, unique) -> None:
    topic = broker.create_topic(unique("bulk-tally"), 2)
    ranges = produce_input(broker, topic, 2, 200, 20, seed=2)
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
    ranges = input_ranges(broker, topic, 2)
    result = bulk_catch_up(spark, TRAIL, broker.settings(), ranges, "changelog", "Partition 1",
                           plan=plan)
    assert result.plan == plan
    assert result.records == 1500  # the aborted transaction's 300 records are skipped
    _bulk_store(tmp_path / "bulk", result)
    consumer_path(broker, tmp_path / "ref", ranges, "changelog")
    bulk, ref = store_bytes(tmp_path / "bulk"), store_bytes(tmp_path / "ref")
    assert len(ref) > 40
    assert bulk == ref
    with TaskStore(tmp_path / "bulk") as store:
        assert store.applied_offsets() == {name: end for name, (_, end) in ranges.items()}
        assert {type(k) for k in store.state} == {bytes, str}


def test_ingest_is_refused_into_a_store_with_state(spark, broker, unique, tmp_path) -> None:
    topic = broker.create_topic(unique("bulk-busy"), 1)
    result = bulk_catch_up(spark, SUM, broker.settings(), {f"{topic}:0": (0, 0)}, "input", "t")
    with TaskStore(tmp_path / "busy") as store:
        store.state[b"k"] = 1
        store.commit({f"{topic}:0": 5})
        with pytest.raises(BulkCatchUpError, match="already holds state"):
            ingest_bulk(store, result)
        assert store.applied_offsets() == {f"{topic}:0": 5}


def test_executor_failure_is_retried_then_raised(spark, broker, unique) -> None:
    assert spark.sparkContext.master == "local[2,4]"  # local mode retries tasks too
    topic = broker.create_topic(unique("bulk-bomb"), 1)
    ranges = produce_input(broker, topic, 1, 10, 2, seed=4)
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
    ranges = produce_input(broker, topic, 2, 2000, 100, seed=3)
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
    consumer_path(broker, tmp_path / "ref", ranges, "input")
    assert store_bytes(tmp_path / "bulk") == store_bytes(tmp_path / "ref")
