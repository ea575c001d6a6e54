"""Entries with a TTL and prefix scans on the Spark bulk path (real broker, Spark,
RocksDB): the store a bulk catch-up ingests holds, byte for byte, what the consumer
path builds from the same records (RecentSum: scans of each key's recent values, a
total that lapses; timestamps out of order too), expiries and expiry deletes included."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.job import Record
from processor.jobspec import JobSpec
from processor.spark.bulk import bulk_catch_up
from processor.spark.ingest import ingest_bulk
from processor.testing import JobHarness
from store import TaskStore
from tests.processor.state_jobs import RecentSum

pytestmark = [pytest.mark.spark, pytest.mark.integration]

_RECORDS = 120


@pytest.mark.parametrize("plan", ["local", "shuffle"])
def test_a_bulk_fold_expires_and_scans_as_the_consumer_path(spark, broker, unique,
                                                            tmp_path: Path, plan: str) -> None:
    topic = broker.create_topic(unique("events"), 1)
    producer = broker.producer()
    sent: list[Record] = []
    stamp = 1_700_000_000_000
    for i in range(_RECORDS):
        # steps of 0-400 ms, every 7th record 900 ms back (out of order)
        stamp += -900 if i % 7 == 6 else (i * 37) % 400
        key, value = b"k%d" % (i % 3 * 5), b"%d" % (i % 9 + 1)    # k0, k5, k10
        producer.produce(topic, key=key, value=value, timestamp=stamp)
        sent.append(Record(key, value, topic, 0, i, stamp))
    producer.flush(30)
    spec = JobSpec("tests.processor.state_jobs:RecentSum", "job", {})
    result = bulk_catch_up(spark, spec, broker.settings(), {f"{topic}:0": (0, _RECORDS)},
                           "input", "Partition 0", plan=plan)   # type: ignore[arg-type]
    with TaskStore(tmp_path / "bulk") as store:
        ingest_bulk(store, result)
        folded = list(store.snapshot())
    with JobHarness(RecentSum, commit_every=_RECORDS, partitions=[f"{topic}:0"]) as harness:
        harness.send_batch(sent)
        harness.commit()
        consumed = list(harness.store.snapshot())
    assert folded == consumed
    assert sum(1 for key, _ in consumed if b"/" in key) < _RECORDS   # entries expired
