"""A split child's warmup on the Spark path (its parent's partition read with the key
filter) builds the same store, byte for byte, as the consumer path.

The parent partition `t:0` holds the keys of both tasks up to the expansion barrier,
the child partition `t:1` only the child's since; the parent has committed both. Two
processors warm the child up, one through Spark, one through its consumer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from orchestrator.wire.config import parse_config
from orchestrator.wire.partitioners import home_partition
from orchestrator.wire.protocol import Barrier, HeartbeatReply, RoleListing
from processor.runtime import TaskRuntime
from store.codec import META_PREFIX
from tests.processor.spark.bulk_support import store_bytes
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

# the size by default; BATON_SPLIT_BULK_RECORDS makes a quicker run
PARENT_RECORDS = int(os.environ.get("BATON_SPLIT_BULK_RECORDS", "1000000"))
CHILD_RECORDS = 2000
KEYS = 5000


def _fill(broker: Any, topic: str) -> None:
    producer = broker.producer(**{"linger.ms": 50, "batch.num.messages": 10000,
                                  "queue.buffering.max.messages": 200_000})
    for i in range(PARENT_RECORDS):
        producer.produce(topic, key=f"k{i % KEYS}".encode(), value=str(i % 9 + 1).encode(),
                         partition=0)
        if i % 50_000 == 49_999:
            assert producer.flush(120) == 0
    child_keys = [k for k in (f"k{i}".encode() for i in range(KEYS))
                  if home_partition("consistent_random", k, 2) == 1]
    for i in range(CHILD_RECORDS):
        producer.produce(topic, key=child_keys[i % len(child_keys)], value=b"3", partition=1)
    assert producer.flush(120) == 0


def _commit(broker: Any, group: str, topic: str) -> None:
    """The parent's owner has consumed (and committed) both partitions."""
    consumer = Consumer(broker.settings(**{"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, PARENT_RECORDS),
                                 TopicPartition(topic, 1, CHILD_RECORDS)], asynchronous=False)
    finally:
        consumer.close()


def _warm(raw: dict[str, Any], tmp_path: Path, name: str, threshold: int) -> Path:
    raw = {**raw, "processor": {**raw["processor"], "state_dir": str(tmp_path / name)},
           "catch_up": {"bulk_threshold": threshold}, "spark": {"master": "local[2]"}}
    config = parse_config(raw)
    topic = config.job.inputs[0]
    runtime = TaskRuntime(config, name)
    reply = HeartbeatReply(
        alive=True, tasks={"Partition 0": [f"{topic}:0"], "Partition 1": [f"{topic}:1"]},
        barriers={f"{topic}:1": Barrier(parent=f"{topic}:0", offset=PARENT_RECORDS)},
        pending={"Partition 1": "Partition 0"}, assignment=RoleListing(warmup=["Partition 1"]))
    try:
        runtime.apply(reply)
        assert ("Partition 1" in runtime.bulk) == (threshold < PARENT_RECORDS)
        wait_for(lambda: not runtime.bulk.busy and runtime.replicas["Partition 1"].lag() == 0,
                 600, f"{name}: the child caught up", lambda: runtime.poll(0.05))
        path = runtime.replicas["Partition 1"].store.path
        positions = dict(runtime.replicas["Partition 1"].positions)
    finally:
        runtime.close(commit=True)
    assert positions == {f"{topic}:0": PARENT_RECORDS, f"{topic}:1": CHILD_RECORDS}
    return path


def test_spark_and_consumer_paths_build_the_same_child(spark, broker, job_config,
                                                        tmp_path: Path) -> None:
    raw = job_config(partitions=2)
    config = parse_config(raw)
    topic = config.job.inputs[0]
    _fill(broker, topic)
    _commit(broker, f"baton.{config.job.name}", topic)
    by_spark = store_bytes(_warm(raw, tmp_path, "spark", threshold=1000))
    by_consumer = store_bytes(_warm(raw, tmp_path, "consumer", threshold=10 * PARENT_RECORDS))
    assert by_spark == by_consumer
    data = [k for k, _ in by_spark if not k.startswith(META_PREFIX)]
    child_keys = [i for i in range(KEYS)
                  if home_partition("consistent_random", f"k{i}".encode(), 2) == 1]
    assert len(data) == len(child_keys), "the child holds exactly its own keys"
