"""The replays' consumers (real broker): when two replays here need one partition (a
split child's activation reads its parent's partition, which the parent's own activation
reads), the second assign is refused, and cleaning up after it leaves the first one
reading: before, its cleanup unassigned the shared partition and the first replay
waited for records that never came."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException

from orchestrator.wire.clock import SystemClock
from processor.runtime.replay_consumers import ReplayConsumers

pytestmark = pytest.mark.integration


@dataclass
class _Replica:
    """What the consumers ask of a replay: its partitions, role and start offsets."""

    name: str
    partitions: list[str]
    role: str = "activating"

    def start_offset(self, partition: str) -> int:
        return 0

    def rewound(self, partitions: Sequence[str]) -> None:
        pass


def _consumer(broker: Any) -> Consumer:
    return Consumer(broker.settings(**{"group.id": f"replays-{uuid.uuid4()}",
                                       "enable.auto.commit": False,
                                       "auto.offset.reset": "earliest"}))


def _assigned(consumer: Consumer) -> list[int]:
    return sorted(tp.partition for tp in consumer.assignment())


def test_a_refused_replay_leaves_the_shared_partition_to_the_one_reading_it(
        broker: Any, unique: Any) -> None:
    topic = broker.create_topic(unique("events"), 8)
    producer = broker.producer()
    for i in range(20):
        producer.produce(topic, key=b"k", value=str(i).encode(), partition=3)
    assert producer.flush(30) == 0
    replay, activation = _consumer(broker), _consumer(broker)
    try:
        consumers = ReplayConsumers(replay, activation, SystemClock())
        parent = _Replica("Partition 3", [f"{topic}:3"])
        child = _Replica("Partition 7", [f"{topic}:3", f"{topic}:7"])
        consumers.assign(parent)                # type: ignore[arg-type]
        with pytest.raises(KafkaException, match="already part of the current assignment"):
            consumers.assign(child)             # type: ignore[arg-type]
        consumers.unassign(child)               # type: ignore[arg-type]
        assert _assigned(activation) == [3] and consumers.activating
        got: list[Any] = []
        for _ in range(50):
            got += [m for m in consumers.consume(100, 0.2) if m.error() is None]
            if len(got) >= 20:
                break
        assert len(got) == 20                   # the parent's replay still reads
        consumers.unassign(parent)              # type: ignore[arg-type]
        assert _assigned(activation) == [] and not consumers.activating
    finally:
        replay.close()
        activation.close()
