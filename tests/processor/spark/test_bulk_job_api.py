"""The Job API on the Spark bulk path (real broker, Spark, RocksDB): the executors make
the job from a JobSpec ([job.params], setup with role "bulk", close), hand records
their headers, and keep a list or dict changed in place, as the consumer path does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from processor.job import Record
from processor.jobspec import JobSpec
from processor.spark.bulk import bulk_catch_up
from processor.spark.ingest import ingest_bulk
from processor.testing import run_job
from store import TaskStore
from tests.processor.api_jobs import HookedSum

pytestmark = [pytest.mark.spark, pytest.mark.integration]


@pytest.mark.parametrize("plan", ["local", "shuffle"])
def test_the_fold_sees_params_headers_and_in_place_changes(spark, broker, unique,
                                                            tmp_path: Path, plan: str) -> None:
    topic = broker.create_topic(unique("events"), 1)
    producer = broker.producer()
    sent: list[Record] = []
    for i in range(40):
        key, headers = b"k%d" % (i % 4), [("src", b"s%d" % i)]
        producer.produce(topic, key=key, value=b"2", headers=headers)
        sent.append(Record(key, b"2", topic, 0, i, 0, headers))
    producer.flush(30)
    spec = JobSpec("tests.processor.api_jobs:HookedSum", "job", {"scale": 5})
    result = bulk_catch_up(spark, spec, broker.settings(), {f"{topic}:0": (0, 40)}, "input",
                           "Partition 0", plan=plan)    # type: ignore[arg-type]
    with TaskStore(tmp_path / "bulk") as store:
        ingest_bulk(store, result)
        folded: dict[Any, Any] = dict(store.state.items())
    expected = run_job(HookedSum, sent, params={"scale": 5}).state
    assert folded == expected
    assert folded[b"k1"] == {"total": 100, "sources": [f"s{i}" for i in range(1, 40, 4)]}
