"""The three-node Apache Kafka cluster of the tests: where a transactional id's
coordinator lives (Java's String.hashCode, as the broker computes it), and, on the
cluster itself (its lane: BATON_TEST_BROKER=kafka3), every topic replicated three
times with two replicas required in sync, the internal ones included."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from orchestrator.devkit.kafka_cluster import transaction_partition
from tests.brokers import Broker


@pytest.mark.parametrize(("transactional_id", "java_hash"), [
    ("", 0), ("Aa", 2112), ("BB", 2112), ("hello", 99162322),
    ("baton.sums.Partition 3", None),
    ("polygenelubricants", -(1 << 31)),      # Integer.MIN_VALUE: Utils.abs makes it 0
    ("é€", 233 * 31 + 0x20AC),              # UTF-16 code units, not bytes
])
def test_transaction_partition_follows_the_broker(transactional_id: str,
                                                  java_hash: int | None) -> None:
    for partitions in (1, 6, 50):
        found = transaction_partition(transactional_id, partitions)
        assert 0 <= found < partitions
        if java_hash is not None:
            expected = 0 if java_hash == -(1 << 31) else abs(java_hash) % partitions
            assert found == expected, (transactional_id, partitions)


@pytest.mark.integration
@pytest.mark.kafka3
def test_every_topic_has_three_replicas_and_two_in_sync(broker: Broker) -> None:
    assert broker.cluster is not None
    topic = broker.create_topic("replicated", 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    meta = admin.list_topics(timeout=30)
    assert len(meta.brokers) == 3
    for name in (topic, "__consumer_offsets", "__transaction_state"):
        partitions = meta.topics[name].partitions.values()
        assert partitions and all(len(p.replicas) == 3 for p in partitions), name
    resource = ConfigResource(ResourceType.TOPIC, topic)
    config = admin.describe_configs([resource])[resource].result(30)
    assert config["min.insync.replicas"].value == "2"
