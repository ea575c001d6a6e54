"""Replica (catch_up.source = "input") on real RocksDB with messages made up: a consumer
error inside a partition's run (the runtime hands runs over whole) is skipped."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from processor.examples import RunningSum
from processor.replica import Replica


def test_a_consumer_error_in_a_run_is_logged_and_skipped(
        store: Any, caplog: pytest.LogCaptureFixture) -> None:
    replica = Replica("Partition 0", ["in:0"], RunningSum(), store, "warmup", {"in:0": 0},
                      {"in:0": 10})
    error = Message(topic="in", partition=0, error=KafkaError(KafkaError._TRANSPORT))  # noqa: SLF001
    batch = [Message(topic="in", partition=0, offset=0, key=b"k", value=b"2"), error,
             Message(topic="in", partition=0, offset=1, key=b"k", value=b"3")]
    replica.apply(batch)
    replica.commit()
    assert store.state[b"k"] == 5
    assert replica.positions == {"in:0": 2}
    assert replica.applied_total == 2
    assert "consumer error on in:0" in caplog.text


def _records(partition: int, offsets: range, key: bytes, value: bytes = b"1") -> list[Message]:
    return [Message(topic="in", partition=partition, offset=o, key=key, value=value)
            for o in offsets]


def _split_child(store: Any) -> Replica:
    """A split child's replica: the parent `in:0` (its key filter keeps `k`) up to its
    barrier at 4, then the child's own `in:1`, which waits for the parent (its gate)."""
    return Replica("Partition 1", ["in:0", "in:1"], RunningSum(), store, "warmup",
                   {"in:0": 0, "in:1": 0}, {"in:0": 4, "in:1": 10},
                   filters={"in:0": lambda key: key == b"k"}, gates={"in:1": ["in:0"]})


def test_a_gated_partition_applies_nothing_more_of_a_batch_once_the_gate_opens(
        store: Any) -> None:
    """One poll batch holds the child's own records, then the parent's up to the barrier
    (the gate opens), then more of the child's. The first were held back by the gate, so
    the later ones are not the next to apply: applied, they would skip the first ones
    (the child's state would lose their effect). The partition waits for the consumer
    to read it again from the replica's position."""
    replica = _split_child(store)
    batch = [*_records(1, range(0, 3), b"k"), *_records(0, range(0, 4), b"k"),
             *_records(1, range(3, 5), b"k")]
    capped = replica.apply(batch)
    replica.commit()
    assert store.state[b"k"] == 4                      # the parent's four, none of the child's
    assert replica.positions == {"in:0": 4, "in:1": 0}
    assert "in:1" in capped                      # paused, to be read again from 0
    # a later batch of the same fetch (read past offset 0) is not the next either
    replica.apply(_records(1, range(5, 7), b"k"))
    assert replica.positions["in:1"] == 0
    replica.rewound(["in:1"])                    # the consumer was sent back to 0
    replica.apply(_records(1, range(0, 7), b"k"))
    replica.commit()
    assert store.state[b"k"] == 4 + 7
    assert replica.positions == {"in:0": 4, "in:1": 7}


def test_records_past_a_cap_are_not_followed_by_later_ones_before_a_rewind(
        store: Any) -> None:
    """A partition read past its cap (the owner's committed offset) applies nothing
    more until its consumer reads it again from the position, even if the cap moved
    on meanwhile: the records between would be lost."""
    replica = Replica("Partition 0", ["in:0"], RunningSum(), store, "warmup", {"in:0": 0},
                      {"in:0": 2})
    assert replica.apply(_records(0, range(0, 4), b"k")) == {"in:0"}
    replica.caps = {"in:0": 10}                  # the owner committed more
    replica.apply(_records(0, range(4, 6), b"k"))
    assert replica.positions == {"in:0": 2}
    replica.rewound(["in:0"])
    replica.apply(_records(0, range(2, 6), b"k"))
    replica.commit()
    assert store.state[b"k"] == 6
    assert replica.positions == {"in:0": 6}
