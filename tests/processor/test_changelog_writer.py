"""The active side of the changelog, without a broker: one record per key changed in a
transaction (its last value, deletes as tombstones) plus its input offsets, the
snapshot of a store that never followed its partition, the position to commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from processor.changelog import ChangelogTarget, ChangelogWriter, produce_run, transaction_records
from processor.transaction import callback_error as _callback_error
from store import changelog_offset, changelog_offset_record


class _Message:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class FakeProducer:
    """Records produce() calls; `flush()` reports delivery of everything produced."""

    def __init__(self, full_once: bool = False) -> None:
        self.sent: list[tuple[str, bytes | None, bytes, int]] = []
        self.callbacks: list[tuple[int, Callable[..., None]]] = []
        self.full_once = full_once
        self.polled = 0

    def produce(self, topic: str, value: bytes | None, key: bytes, partition: int,
                callback: Callable[..., None] | None = None) -> None:
        if self.full_once:
            self.full_once = False
            raise BufferError("queue full")
        self.sent.append((topic, value, key, partition))
        if callback is not None:
            self.callbacks.append((len(self.sent) - 1 + 100, callback))

    def poll(self, timeout: float) -> int:
        self.polled += 1
        return 0

    def flush(self) -> None:
        for offset, callback in self.callbacks:
            callback(None, _Message(offset))
        self.callbacks.clear()


TARGET = ChangelogTarget("baton.j.changelog", 3)


def test_transaction_records_are_the_changes_then_the_offsets_in_order() -> None:
    records = transaction_records([(b"\x02a", b"1"), (b"\x02b", None)], {"in:1": 7, "in:0": 3})
    assert records == [(b"\x02a", b"1"), (b"\x02b", None),
                       changelog_offset_record("in:0", 3), changelog_offset_record("in:1", 7)]


def test_one_record_per_changed_key_however_often_it_was_written(store: Any) -> None:
    for total in range(1, 101):           # 100 records of one transaction, 3 keys
        store.state["hot"] = total
        store.state[b"k%d" % (total % 2)] = total
    store.state["gone"] = 1
    del store.state["gone"]
    producer, writer = FakeProducer(), ChangelogWriter(TARGET, snapshot_due=False)
    assert writer.write(producer, store, {"in:0": 100}, {"in:0": 0}) == 5
    assert {(k, v) for _, v, k, _ in producer.sent} == {
        (b"\x02hot", b"100"), (b"\x01k0", b"100"), (b"\x01k1", b"99"), (b"\x02gone", None),
        changelog_offset_record("in:0", 100)}
    assert {(t, p) for t, _, _, p in producer.sent} == {(TARGET.topic, 3)}
    assert len(producer.callbacks) == 1       # only the last record reports its offset
    producer.flush()
    assert writer.committed() == {"baton.j.changelog:3": 105}


def test_nothing_delivered_means_no_position(store: Any) -> None:
    writer = ChangelogWriter(TARGET, snapshot_due=False)
    store.state["a"] = 1
    writer.write(FakeProducer(), store, {"in:0": 1}, {})
    assert writer.committed() == {}          # aborted before delivery: no position


def test_a_store_that_never_followed_the_partition_is_written_whole_once(store: Any) -> None:
    store.state["old"] = 1
    store.state["older"] = 2
    store.commit({"in:0": 10, "in:1": 4})
    store.state["new"] = 3
    producer, writer = FakeProducer(), ChangelogWriter(TARGET, snapshot_due=True)
    writer.write(producer, store, {"in:0": 11}, {"in:0": 10, "in:1": 4})
    keys = [k for _, _, k, _ in producer.sent]
    assert keys[:3] == [b"\x02new", b"\x02old", b"\x02older"]
    assert [changelog_offset(k, v) for _, v, k, _ in producer.sent[3:]] == [
        ("in:0", 11), ("in:1", 4)]
    assert writer.snapshot_due                # until a transaction carrying it commits
    producer.flush()
    writer.committed()
    assert not writer.snapshot_due
    store.commit({"in:0": 11})
    store.state["new"] = 4
    again = FakeProducer()
    writer.write(again, store, {"in:0": 12}, {"in:0": 11, "in:1": 4})
    assert [k for _, _, k, _ in again.sent] == [b"\x02new",
                                                changelog_offset_record("in:0", 12)[0]]


def test_a_full_local_queue_is_waited_out(store: Any) -> None:
    store.state["a"] = 1
    producer = FakeProducer(full_once=True)
    ChangelogWriter(TARGET, snapshot_due=False).write(producer, store, {"in:0": 1}, {})
    assert producer.polled == 1 and len(producer.sent) == 2


def test_a_fence_raised_through_a_delivery_callback_is_the_fence() -> None:
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    wrapped = SystemError("callback returned a result with an exception set")
    wrapped.__cause__ = fenced
    assert _callback_error(wrapped) is fenced
    assert _callback_error(fenced) is fenced              # raised as itself
    with pytest.raises(SystemError):
        _callback_error(SystemError("something else"))


class _Queue:
    """A producer's local queue that takes `room` records, then refuses one."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.taken: list[tuple[str, bytes | None, bytes, int]] = []

    def produce(self, topic: str, value: bytes | None, key: bytes, partition: int) -> None:
        if len(self.taken) == self.room:
            raise BufferError("Local: Queue full")
        self.taken.append((topic, value, key, partition))


@pytest.mark.parametrize("room", [0, 1, 3, 5, 9])
def test_a_run_stops_where_the_queue_refuses_and_says_how_far(room: int) -> None:
    keys = [b"k%d" % i for i in range(5)]
    values = [b"v%d" % i for i in range(4)] + [None]
    queue = _Queue(room)
    took = produce_run(queue.produce, "t", 2, keys, values)
    assert took == min(room, 5)
    assert queue.taken == [("t", v, k, 2) for k, v in zip(keys, values, strict=True)][:took]
