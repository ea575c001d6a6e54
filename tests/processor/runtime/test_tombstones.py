"""The tombstone horizon counts `delete.retention.ms` back from its clock's wall time:
records younger than that cannot have lost a delete, records older may have."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer

from processor.runtime.tombstones import TombstoneHorizon
from tests.brokers import Broker
from tests.clocks import FakeClock


def test_the_horizon_counts_back_from_the_injected_clocks_wall_time(broker: Broker) -> None:
    topic = broker.create_topic(f"horizon-{uuid.uuid4().hex[:8]}", 1)
    producer = broker.producer()
    for n in range(3):
        producer.produce(topic, key=b"k", value=str(n).encode())
    assert producer.flush(30) == 0
    clock = FakeClock(wall_start=time.time())
    horizon = TombstoneHorizon(broker.settings(), topic, clock)
    consumer = Consumer(broker.settings(**{"group.id": f"horizon-{uuid.uuid4()}"}))
    try:
        assert not horizon.may_have_lost_deletes(consumer, f"{topic}:0", 0, 3), \
            "records written just now are younger than delete.retention.ms"
        assert not horizon.may_have_lost_deletes(consumer, f"{topic}:0", 3, 3), \
            "nothing left to read: nothing lost"
        clock.advance(horizon.retention_ms() / 1000 + 60)
        assert horizon.may_have_lost_deletes(consumer, f"{topic}:0", 0, 3), \
            "on the clock's wall time the records are older than delete.retention.ms"
    finally:
        consumer.close()
