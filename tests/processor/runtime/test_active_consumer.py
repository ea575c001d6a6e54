"""Offset lookups the brokers cannot answer (an offset commit of another producer's
transaction still pending on the partition) hold no other task:

- an active task that grows (expansion) looks its new partitions up in one bounded
  attempt on the loop; the next reply tries again, and the task grows once it answers;
- an expansion child's parent, another processor's partition, is looked up beside the
  loop until it passes the barrier; the child starts then;
- an expansion child's activation reads its parent's T1 (its replay reads the parent up
  to the barrier) on the fence's thread: the child stays fencing until it answers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from orchestrator.wire.config import parse_config
from orchestrator.wire.protocol import Barrier
from processor.lifecycle import Stage
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


class _PendingCommit:
    """Another transactional producer holding an offset commit of the job's group
    pending on one partition until `commit()`: what an owner frozen inside its
    transaction does (a stable lookup of that partition cannot answer meanwhile)."""

    def __init__(self, broker: Broker, unique: Callable[[str], str], group: str) -> None:
        self._holder = Producer(broker.settings(**{"transactional.id": unique("holder"),
                                                   "transaction.timeout.ms": 60_000}))
        self._member = Consumer(broker.settings(**{"group.id": group}))

    def hold(self, partition: TopicPartition) -> None:
        self._holder.init_transactions(30)
        self._holder.begin_transaction()
        self._holder.send_offsets_to_transaction([partition],
                                                 self._member.consumer_group_metadata(), 30)

    def commit(self) -> None:
        self._holder.commit_transaction(30)

    def close(self) -> None:
        self._member.close()


class _TimedPolls:
    """Polls a runtime, keeping the slowest call it timed."""

    def __init__(self, runtime: TaskRuntime) -> None:
        self._runtime = runtime
        self.slowest = 0.0

    def timed(self, call: Callable[[], object]) -> None:
        started = time.monotonic()
        call()
        self.slowest = max(self.slowest, time.monotonic() - started)

    def __call__(self) -> None:
        self.timed(lambda: self._runtime.poll(0.05))


def test_growing_beside_a_pending_offset_commit_holds_no_other_task(
        broker: Broker, job_config: Callable[..., dict[str, Any]], tmp_path: Path,
        unique: Callable[[str], str]) -> None:
    raw = job_config(partitions=3)
    topic = parse_config(raw).job.inputs[0]
    first, second, new = f"{topic}:0", f"{topic}:1", f"{topic}:2"
    before = {GROWING: [first], OTHER: [second]}
    grown = {GROWING: [first, new], OTHER: [second]}
    runtime = new_runtime(raw, tmp_path, "p1")
    pending = _PendingCommit(broker, unique, runtime.group)
    try:
        runtime.apply(assignment_reply(before, active=[GROWING, OTHER]))
        feed_keys(broker, topic, 0, 300)
        end = _end(broker, topic, 1)
        wait_for(lambda: _committed(runtime, OTHER, second) >= end, 60,
                 "the other task's records", lambda: runtime.poll(0.05))
        # another producer's transaction holds an offset commit of the group pending on
        # the partition the task gains: a stable lookup of it waits until that ends
        pending.hold(TopicPartition(topic, 2, 3))

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

        pending.commit()        # stable again, at 3: the next reply grows it

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
        pending.close()
        runtime.close(commit=False)


CHILD, BESIDE = "Partition 1", "Partition 2"


def test_a_barrier_whose_parent_lookup_cannot_answer_holds_no_other_task(
        broker: Broker, job_config: Callable[..., dict[str, Any]], tmp_path: Path,
        unique: Callable[[str], str]) -> None:
    """An expansion child waits for its parent, another processor's partition, to pass
    the barrier. While the parent's owner holds an offset commit pending (frozen inside
    its transaction), a stable lookup of the parent cannot answer: it runs beside the
    loop, every poll returns at once, the other task keeps committing, and the child
    starts once the lookup answers past the barrier."""
    raw = job_config(partitions=3)
    topic = parse_config(raw).job.inputs[0]
    parent, child, other = f"{topic}:0", f"{topic}:1", f"{topic}:2"
    model = {"Partition 0": [parent], CHILD: [child], BESIDE: [other]}
    reply = assignment_reply(model, active=[CHILD, BESIDE]).model_copy(
        update={"barriers": {child: Barrier(parent=parent, offset=5)}})
    runtime = new_runtime(raw, tmp_path, "p1")
    pending = _PendingCommit(broker, unique, runtime.group)
    poll = _TimedPolls(runtime)
    try:
        runtime.apply(reply)
        feed_keys(broker, topic, 0, 300)
        end = _end(broker, topic, 2)
        # each activation fences on a thread of its own: the other task may commit its
        # records before the child is active
        wait_for(lambda: CHILD in runtime.active
                 and _committed(runtime, BESIDE, other) >= end, 60,
                 "both tasks active, the other one committing", runtime.poll)
        assert child not in runtime.consumers.active.owner
        pending.hold(TopicPartition(topic, 0, 10))     # the parent's owner, frozen
        feed_keys(broker, topic, 300, 300)
        end = _end(broker, topic, 2)
        poll.slowest = 0.0
        wait_for(lambda: _committed(runtime, BESIDE, other) >= end, 30,
                 "the other task committing while the parent's lookup cannot answer", poll)
        for _ in range(20):
            poll()
        assert poll.slowest < 3.0, \
            f"a poll took {poll.slowest:.1f} s: the loop waited on the lookup"
        assert child not in runtime.consumers.active.owner, "the child started early"
        assert _committed(runtime, CHILD, child) == 0

        pending.commit()        # the parent committed at 10, past the barrier
        end = _end(broker, topic, 1)
        wait_for(lambda: _committed(runtime, CHILD, child) >= end, 30,
                 "the child's records once its parent passed the barrier", poll)
        assert not runtime.failed
    finally:
        pending.close()
        runtime.close(commit=False)


def test_an_activation_whose_parent_lookup_cannot_answer_holds_no_other_task(
        broker: Broker, job_config: Callable[..., dict[str, Any]], tmp_path: Path,
        unique: Callable[[str], str]) -> None:
    """An expansion child's activation needs T1 of its parent, another processor's
    partition. While the parent's owner holds an offset commit pending, that lookup
    waits on the fence's thread: every poll returns at once, the other task keeps
    committing, and the child goes active once the lookup answers."""
    raw = job_config(partitions=3)
    topic = parse_config(raw).job.inputs[0]
    parent, child, other = f"{topic}:0", f"{topic}:1", f"{topic}:2"
    model = {"Partition 0": [parent], CHILD: [child], BESIDE: [other]}
    barriers = {"barriers": {child: Barrier(parent=parent, offset=5)}}
    runtime = new_runtime(raw, tmp_path, "p1")
    pending = _PendingCommit(broker, unique, runtime.group)
    poll = _TimedPolls(runtime)
    try:
        runtime.apply(assignment_reply(model, active=[BESIDE]).model_copy(update=barriers))
        feed_keys(broker, topic, 0, 300)
        end = _end(broker, topic, 2)
        wait_for(lambda: _committed(runtime, BESIDE, other) >= end, 60,
                 "the other task committing", runtime.poll)
        pending.hold(TopicPartition(topic, 0, 10))     # the parent's owner, frozen
        poll.timed(lambda: runtime.apply(
            assignment_reply(model, active=[CHILD, BESIDE]).model_copy(update=barriers)))
        feed_keys(broker, topic, 300, 300)
        end = _end(broker, topic, 2)
        wait_for(lambda: _committed(runtime, BESIDE, other) >= end, 30,
                 "the other task committing while the parent's lookup cannot answer", poll)
        for _ in range(20):
            poll()
        assert poll.slowest < 3.0, \
            f"a poll took {poll.slowest:.1f} s: the loop waited on the lookup"
        assert runtime.driver.stage_of(CHILD) is Stage.FENCING, "activated past the lookup"

        pending.commit()        # the parent committed at 10, past the barrier
        end = _end(broker, topic, 1)
        wait_for(lambda: _committed(runtime, CHILD, child) >= end, 30,
                 "the child active, its records committed", poll)
        assert not runtime.failed
    finally:
        pending.close()
        runtime.close(commit=False)
