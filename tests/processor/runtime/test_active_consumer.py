"""An active task that grows (expansion): its new partitions' committed offsets are looked
up in one bounded attempt on the loop, so a lookup the brokers cannot answer (an offset
commit of a transaction still pending on the new partition) holds no other task; the
next reply tries again, and the task grows once the lookup answers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from orchestrator.wire.config import parse_config
from processor.runtime import TaskRuntime
from tests.brokers import Broker
from tests.processor.runtime.runtime_support import assignment_reply, feed_keys, new_runtime
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

GROWING, OTHER = "Partition 0", "Partition 1"


def _end(broker: Broker, topic: str, partition: int) -> int:
    reader = Consumer(broker.settings(**{"group.id": "ends"}))
    try:
        return int(reader.get_watermark_offsets(TopicPartition(topic, partition), 10)[1])
    finally:
        reader.close()


def _committed(runtime: TaskRuntime, task: str, partition: str) -> int:
    active = runtime.active.get(task)
    return -1 if active is None else active.committed.get(partition, -1)


def test_growing_beside_a_pending_offset_commit_holds_no_other_task(
        broker: Broker, job_config: Callable[..., dict[str, Any]], tmp_path: Path,
        unique: Callable[[str], str]) -> None:
    raw = job_config(partitions=3)
    topic = parse_config(raw).job.inputs[0]
    first, second, new = f"{topic}:0", f"{topic}:1", f"{topic}:2"
    before = {GROWING: [first], OTHER: [second]}
    grown = {GROWING: [first, new], OTHER: [second]}
    runtime = new_runtime(raw, tmp_path, "p1")
    holder = Producer(broker.settings(**{"transactional.id": unique("holder"),
                                         "transaction.timeout.ms": 60_000}))
    member = Consumer(broker.settings(**{"group.id": runtime.group}))
    try:
        runtime.apply(assignment_reply(before, active=[GROWING, OTHER]))
        feed_keys(broker, topic, 0, 300)
        end = _end(broker, topic, 1)
        wait_for(lambda: _committed(runtime, OTHER, second) >= end, 60,
                 "the other task's records", lambda: runtime.poll(0.05))
        # another producer's transaction holds an offset commit of the group pending on
        # the partition the task gains: a stable lookup of it waits until that ends
        holder.init_transactions(30)
        holder.begin_transaction()
        holder.send_offsets_to_transaction([TopicPartition(topic, 2, 3)],
                                           member.consumer_group_metadata(), 30)

        started = time.monotonic()
        runtime.apply(assignment_reply(grown, active=[GROWING, OTHER]))
        took = time.monotonic() - started
        assert took < 5.0, f"growing held the loop {took:.1f} s"
        assert new not in runtime.active[GROWING].partitions, "grown on an unstable lookup"
        feed_keys(broker, topic, 300, 300)
        end = _end(broker, topic, 1)
        wait_for(lambda: _committed(runtime, OTHER, second) >= end, 10,
                 "the other task committing while the lookup cannot answer",
                 lambda: runtime.poll(0.05))

        holder.commit_transaction(30)       # stable again, at 3: the next reply grows it

        def grows() -> bool:
            runtime.apply(assignment_reply(grown, active=[GROWING, OTHER]))
            runtime.poll(0.05)
            return new in runtime.active[GROWING].partitions
        wait_for(grows, 30, "the task grown once its lookup answers")
        assert runtime.active[GROWING].committed[new] >= 3
        assert not runtime.failed
        end = _end(broker, topic, 2)
        wait_for(lambda: _committed(runtime, GROWING, new) >= end, 30,
                 "the new partition's records committed", lambda: runtime.poll(0.05))
    finally:
        member.close()
        runtime.close(commit=False)
