"""The three-node Apache Kafka cluster of the tests: where a transactional id's
coordinator lives (Java's String.hashCode, as the broker computes it). The cluster
itself is checked in its lane (tests/test_cluster_faults.py)."""

from __future__ import annotations

import pytest

from orchestrator.devkit.kafka_cluster import transaction_partition


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
