"""Offset lookups at the Kafka edge (orchestrator/kafka/offsets.py), on a real broker."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaException

from orchestrator.kafka.offsets import end_offsets_once, watermarks
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


def _reader(broker, isolation: str) -> Consumer:
    return Consumer(broker.settings(**{"group.id": f"ends-{uuid.uuid4().hex[:8]}",
                                       "isolation.level": isolation}))


def test_the_ends_of_many_partitions_are_their_last_stable_offsets(broker, unique) -> None:
    """Plain records count at once; an open transaction's records only once it commits
    (with its marker), as a read_committed reader sees them; read_uncommitted sees the
    high watermark."""
    topic = broker.create_topic(unique("events"), 3)
    plain = broker.producer()
    for i in range(7):
        plain.produce(topic, value=b"1", partition=i % 2)
    assert plain.flush(30) == 0
    txn = broker.producer(**{"transactional.id": unique("txn")})
    txn.init_transactions(30)
    txn.begin_transaction()
    for _ in range(5):
        txn.produce(topic, value=b"1", partition=2)
    assert txn.flush(30) == 0
    names = [f"{topic}:{p}" for p in range(3)]
    committed, uncommitted = _reader(broker, "read_committed"), _reader(broker, "read_uncommitted")
    try:
        assert end_offsets_once(committed, names, 10) == {names[0]: 4, names[1]: 3,
                                                          names[2]: 0}
        assert end_offsets_once(uncommitted, names, 10)[names[2]] == 5
        txn.commit_transaction(30)
        # the commit marker takes an offset too: the end is past it once the broker has
        # written it, which it does after the commit returned
        wait_for(lambda: end_offsets_once(committed, names, 10)[names[2]] == 6, 10,
                 "the end past the commit marker")
        ends = end_offsets_once(committed, names, 10)
        assert ends == {names[0]: 4, names[1]: 3, names[2]: 6}
        assert ends[names[2]] == watermarks(committed, names[2])[1]
        assert end_offsets_once(committed, [], 10) == {}
    finally:
        committed.close()
        uncommitted.close()


def test_a_partition_the_topic_does_not_have_is_an_error(broker, unique) -> None:
    topic = broker.create_topic(unique("events"), 1)
    reader = _reader(broker, "read_committed")
    try:
        with pytest.raises(KafkaException):
            end_offsets_once(reader, [f"{topic}:0", f"{topic}:5"], 5)
    finally:
        reader.close()
