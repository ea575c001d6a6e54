"""Where a replica starts and what caps it: a warmup started while the group's committed
offsets are unstable (an offset commit of a transaction still pending) starts at once,
capped at the settled offsets, and the processor's other tasks keep committing."""

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
from tests.processor.runtime.runtime_support import (
    assignment_reply,
    feed_keys,
    new_runtime,
    task_model,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

OWNED, WARMING = "Partition 0", "Partition 1"


def _end(broker: Broker, partition: TopicPartition) -> int:
    reader = Consumer(broker.settings(**{"group.id": "ends"}))
    try:
        return int(reader.get_watermark_offsets(partition, timeout=10)[1])
    finally:
        reader.close()


def _committed_to(runtime: TaskRuntime, partition: str, end: int) -> bool:
    active = runtime.active.get(OWNED)
    return active is not None and active.committed.get(partition, -1) >= end


def test_a_warmup_beside_a_pending_offset_commit_holds_no_other_task(
        broker: Broker, job_config: Callable[..., dict[str, Any]], tmp_path: Path,
        unique: Callable[[str], str]) -> None:
    raw = job_config(partitions=2)
    config = parse_config(raw)
    topic = config.job.inputs[0]
    model = task_model(topic, 2)
    runtime = new_runtime(raw, tmp_path, "p1")
    holder = Producer(broker.settings(**{"transactional.id": unique("holder"),
                                         "transaction.timeout.ms": 60_000}))
    member = Consumer(broker.settings(**{"group.id": runtime.group}))
    try:
        runtime.apply(assignment_reply(model, active=[OWNED]))
        feed_keys(broker, topic, 0, 200)
        owned = f"{topic}:0"
        end = _end(broker, TopicPartition(topic, 0))
        wait_for(lambda: _committed_to(runtime, owned, end), 60, "the owned task's records",
                 lambda: runtime.poll(0.05))
        # another producer's transaction holds an offset commit of the group pending on
        # the partition the warmup reads: a stable lookup of it waits until that ends
        holder.init_transactions(30)
        holder.begin_transaction()
        holder.send_offsets_to_transaction([TopicPartition(topic, 1, 3)],
                                           member.consumer_group_metadata(), 30)

        feed_keys(broker, topic, 200, 200)
        started = time.monotonic()
        runtime.apply(assignment_reply(model, active=[OWNED], warmup=[WARMING]))
        took = time.monotonic() - started
        assert took < 5.0, f"starting the warmup held the loop {took:.1f} s"
        assert WARMING in runtime.replicas, runtime.failed
        assert runtime.replicas[WARMING].caps[f"{topic}:1"] == 0    # settled: none yet
        end = _end(broker, TopicPartition(topic, 0))
        wait_for(lambda: _committed_to(runtime, owned, end), 10,
                 "the owned task committing beside the warmup", lambda: runtime.poll(0.05))

        holder.commit_transaction(30)        # T1 stable again, at 3: the caps follow it
        wait_for(lambda: runtime.replicas[WARMING].caps[f"{topic}:1"] == 3, 30,
                 "the warmup capped at the committed offsets", lambda: runtime.poll(0.05))
    finally:
        member.close()
        runtime.close(commit=False)
