"""A split child's warmup on its consumer builds the state its records make, whatever
the order in which one poll batch brings the parent's records and the child's own.

The child's own partition waits for the parent (its gate) until the parent is read to
the barrier. Small record batches and tiny fetches make the replay consumer's queue
alternate between both partitions, and the replica's first poll comes once the queue
holds all of the parent: that one batch brings child records before the parent's last
ones (held back by the gate) and after them (the gate open by then). Those later
records are not the next ones to apply; applied, they would skip the held ones and the
child's state would lack their effect.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from orchestrator.wire.config import parse_config
from orchestrator.wire.partitioners import home_partition
from orchestrator.wire.protocol import Barrier, HeartbeatReply, RoleListing
from processor.runtime import TaskRuntime
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

PARENT_RECORDS = 1000
CHILD_RECORDS = 3000
KEYS = 40
# a fetch brings one small record batch of each partition: the queue alternates
FETCH_BYTES = 1024
RECORD_BATCH = 20
PREFETCH_S = 3.0


def _fill(broker: Any, topic: str) -> dict[bytes, int]:
    """The parent `topic:0` holds both tasks' keys up to the barrier, the child `topic:1`
    the child's since; returns the child's keys' sums."""
    producer = broker.producer(**{"batch.num.messages": RECORD_BATCH})
    sums: dict[bytes, int] = defaultdict(int)
    child_keys = [k for k in (f"k{i}".encode() for i in range(KEYS))
                  if home_partition("consistent_random", k, 2) == 1]
    for i in range(PARENT_RECORDS):
        key, value = f"k{i % KEYS}".encode(), i % 9 + 1
        producer.produce(topic, key=key, value=str(value).encode(), partition=0)
        if key in child_keys:
            sums[key] += value
    for i in range(CHILD_RECORDS):
        key, value = child_keys[i % len(child_keys)], i % 7 + 1
        producer.produce(topic, key=key, value=str(value).encode(), partition=1)
        sums[key] += value
    assert producer.flush(60) == 0
    return dict(sums)


def _commit(broker: Any, group: str, topic: str) -> None:
    """The parent's owner has consumed (and committed) both partitions (a new group's
    coordinator may still be loading: NOT_COORDINATOR is retried)."""
    consumer = Consumer(broker.settings(**{"group.id": group, "enable.auto.commit": False}))

    def committed() -> bool:
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, PARENT_RECORDS),
                                     TopicPartition(topic, 1, CHILD_RECORDS)],
                            asynchronous=False)
        except KafkaException as exc:
            if not exc.args[0].retriable() and \
                    exc.args[0].code() != KafkaError.NOT_COORDINATOR:
                raise
            return False
        return True
    try:
        wait_for(committed, 60, "the parent's offsets committed", lambda: time.sleep(0.2))
    finally:
        consumer.close()


def test_a_split_child_warmup_loses_none_of_its_own_records(broker, job_config,
                                                            tmp_path: Path) -> None:
    raw = job_config(partitions=2)
    raw["kafka"] = {**raw["kafka"], "max.partition.fetch.bytes": FETCH_BYTES}
    config = parse_config(raw)
    topic = config.job.inputs[0]
    want = _fill(broker, topic)
    _commit(broker, f"baton.{config.job.name}", topic)
    runtime = TaskRuntime(config, "p1")
    reply = HeartbeatReply(
        alive=True, tasks={"Partition 0": [f"{topic}:0"], "Partition 1": [f"{topic}:1"]},
        barriers={f"{topic}:1": Barrier(parent=f"{topic}:0", offset=PARENT_RECORDS)},
        pending={"Partition 1": "Partition 0"}, assignment=RoleListing(warmup=["Partition 1"]))
    try:
        runtime.apply(reply)
        replica = runtime.replicas["Partition 1"]
        time.sleep(PREFETCH_S)      # the consumer fetches both partitions meanwhile
        wait_for(lambda: replica.lag() == 0, 120, "the child caught up",
                 lambda: runtime.poll(0.05))
        assert replica.positions == {f"{topic}:0": PARENT_RECORDS,
                                     f"{topic}:1": CHILD_RECORDS}
        got = {key: replica.store.state.get(key) for key in want}
    finally:
        runtime.close(commit=True)
    assert got == want
