"""The replays' consumers (real broker): a replica whose assign failed is cleaned up
without an error, since the runtime's guard unassigns whatever a failed task held."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException

from orchestrator.wire.clock import SystemClock
from processor.runtime.batches import topic_partition
from processor.runtime.replay_consumers import ReplayConsumers

pytestmark = pytest.mark.integration


def _consumer(broker: Any) -> Consumer:
    return Consumer(broker.settings(**{"group.id": f"replays-{uuid.uuid4()}",
                                       "enable.auto.commit": False}))


def test_unassigning_what_was_never_assigned_is_no_error(broker: Any, unique: Any) -> None:
    topic = broker.create_topic(unique("events"), 2)
    replay, activation = _consumer(broker), _consumer(broker)
    try:
        consumers = ReplayConsumers(replay, activation, SystemClock())
        replay.incremental_assign([topic_partition(f"{topic}:0", 0)])
        # librdkafka itself refuses: a partition another replica reads, assigned twice
        with pytest.raises(KafkaException, match="already part of the current assignment"):
            replay.incremental_assign([topic_partition(f"{topic}:0", 0),
                                       topic_partition(f"{topic}:1", 0)])
        consumers.unassign([f"{topic}:1"])       # the failed replica's: never assigned
        assert [tp.partition for tp in replay.assignment()] == [0]
        consumers.unassign([f"{topic}:0", f"{topic}:1"])
        assert replay.assignment() == []
    finally:
        replay.close()
        activation.close()
