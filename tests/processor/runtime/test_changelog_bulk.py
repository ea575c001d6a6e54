"""A warmup under catch_up.source = "changelog" on the Spark path (its changelog
partition folded last write wins, deletes and carried input offsets included) builds
the same store, byte for byte, as the consumer path applying the same changelog.

An active task of ResettableSum (a 0 deletes the key) writes the changelog the real
way, in its transactions; two processors then warm the task up from it, one through
Spark, one through its consumer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry

from metrics import ProcessorMetrics
from orchestrator.wire.changelog import changelog_topic
from orchestrator.wire.config import parse_config
from orchestrator.wire.protocol import HeartbeatReply, RoleListing
from processor.runtime import TaskRuntime
from store.codec import META_PREFIX, OFFSET_PREFIX
from tests.processor.spark.bulk_support import store_bytes
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RECORDS = int(os.environ.get("BATON_CHANGELOG_BULK_RECORDS", "60000"))
KEYS = 3000
TASK = "Partition 0"


def _fill(broker: Any, topic: str) -> None:
    """Sums over KEYS keys; in two rounds (one of them the last) every 5th key gets a 0
    (a delete)."""
    producer = broker.producer(**{"linger.ms": 50, "batch.num.messages": 10000})
    deleting = (3, RECORDS // KEYS - 1)
    for i in range(RECORDS):
        value = b"0" if i // KEYS in deleting and i % 5 == 0 else str(i % 9 + 1).encode()
        producer.produce(topic, key=f"k{i % KEYS}".encode(), value=value, partition=0)
    assert producer.flush(120) == 0


def _reply(topic: str, role: str) -> HeartbeatReply:
    return HeartbeatReply(alive=True, tasks={TASK: [f"{topic}:0"]}, changelog={TASK: 0},
                          assignment=RoleListing(**{role: [TASK]}))


def _write_changelog(raw: dict[str, Any], tmp_path: Path) -> None:
    """The active task processes the whole input, writing its changelog."""
    config = parse_config({**raw, "processor": {**raw["processor"],
                                                "state_dir": str(tmp_path / "active")}})
    topic = config.job.inputs[0]
    runtime = TaskRuntime(config, "active")
    try:
        runtime.apply(_reply(topic, "active"))
        wait_for(lambda: TASK in runtime.active
                 and runtime.active[TASK].committed.get(f"{topic}:0", 0) >= RECORDS,
                 300, "the active task processed the input", lambda: runtime.poll(0.05))
        assert runtime.active[TASK].changelog is not None
        assert runtime.active[TASK].changelog.records_total > 0
    finally:
        runtime.close(commit=True)


def _warm(raw: dict[str, Any], tmp_path: Path, name: str, threshold: int) -> Path:
    raw = {**raw, "processor": {**raw["processor"], "state_dir": str(tmp_path / name)},
           "catch_up": {**raw["catch_up"], "bulk_threshold": threshold},
           "spark": {"master": "local[2]"}}
    config = parse_config(raw)
    registry = CollectorRegistry()
    runtime = TaskRuntime(config, name, metrics=ProcessorMetrics(registry, config.job.name,
                                                                 name))
    try:
        runtime.apply(_reply(config.job.inputs[0], "warmup"))
        assert (TASK in runtime.bulk) == (threshold < RECORDS)
        wait_for(lambda: not runtime.bulk.busy and runtime.replicas[TASK].lag() == 0,
                 600, f"{name}: the warmup caught up", lambda: runtime.poll(0.05))
        replica = runtime.replicas[TASK]
        path = replica.store.path
        reported = replica.reported_positions()
        labels = {"job": config.job.name, "processor": name, "task": TASK}
        by_spark = registry.get_sample_value(
            "baton_catchup_records_total", {**labels, "path": "spark", "source": "changelog"})
        fallbacks = registry.get_sample_value("baton_bulk_fallbacks_total", labels)
    finally:
        runtime.close(commit=True)
    assert reported == {f"{config.job.inputs[0]}:0": RECORDS}, \
        f"{name}: the input offsets the changelog carried"
    assert bool(by_spark) == (threshold < RECORDS), f"{name}: Spark applied {by_spark}"
    assert not fallbacks, f"{name}: the Spark path failed and fell back"
    return path


def test_spark_and_consumer_paths_build_the_same_store_from_the_changelog(
        spark, broker, job_config, tmp_path: Path) -> None:
    raw = job_config(partitions=1, job={"class": "processor.examples:ResettableSum"},
                     catch_up={"source": "changelog"})
    name = raw["job"]["name"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(changelog_topic(name), 1, 1,
                                  config={"cleanup.policy": "compact"})]
                        )[changelog_topic(name)].result(30)
    _fill(broker, raw["job"]["inputs"][0])
    _write_changelog(raw, tmp_path)
    by_spark = store_bytes(_warm(raw, tmp_path, "spark", threshold=1000))
    by_consumer = store_bytes(_warm(raw, tmp_path, "consumer", threshold=10 * RECORDS))
    assert by_spark == by_consumer
    offsets = [k for k, _ in by_spark if k.startswith(OFFSET_PREFIX)]
    assert len(offsets) == 2, "T2 on the changelog and the input offset it carried"
    state = [k for k, _ in by_spark if not k.startswith(META_PREFIX)]
    assert len(state) == KEYS - KEYS // 5, "the keys deleted last are gone (tombstones)"
