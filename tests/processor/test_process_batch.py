"""Job.process_batch: what the replay and active paths call a run of records at a time.
Its results must be process()'s record by record; when it raises, the batch's state
changes are undone and the batch goes through process() one record at a time, so the
failing record alone meets on_error. Real RocksDB; the messages are confluent-kafka's
own Message objects, made up."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import Message

from processor.active import ActiveTask
from processor.examples import RunningSum
from processor.job import Emitted, Record, State
from processor.replica import Replica


def _messages(values: Sequence[tuple[bytes, bytes]], topic: str = "in") -> list[Message]:
    return [Message(topic=topic, partition=0, offset=i, key=k, value=v, timestamp=(1, 1000 + i))
            for i, (k, v) in enumerate(values)]


_INPUT = [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"4"), (b"a", b"5"), (b"b", b"6")]


def test_running_sums_batch_is_its_process_record_by_record() -> None:
    records = [Record(k, v, "in", 0, i, 0) for i, (k, v) in enumerate(_INPUT)]
    one_by_one: dict[Any, Any] = {}
    expected = [list(RunningSum().process(r, one_by_one)) for r in records]
    batched: dict[Any, Any] = {}
    assert [list(o) for o in RunningSum().process_batch(records, batched)] == expected
    assert batched == one_by_one == {b"a": 9, b"b": 8, b"c": 4}


class _PoisonsTheBatch(RunningSum):
    """A batch path that writes a key process() never writes, then fails: its write
    must not survive."""

    def process_batch(self, records: Sequence[Record], state: State
                      ) -> Iterable[Iterable[Emitted]]:
        state[b"poison"] = 1
        raise RuntimeError("batch path broken")


def test_a_replica_redoes_a_failing_batch_record_by_record(store: Any) -> None:
    values = [*_INPUT[:3], (b"a", b"not a number"), *_INPUT[3:]]
    replica = Replica("Partition 0", ["in:0"], RunningSum(), store, "warmup", {"in:0": 0},
                      {"in:0": 100})
    replica.apply(_messages(values))
    replica.commit()
    state = store.state
    assert (state[b"a"], state[b"b"], state[b"c"]) == (9, 8, 4)   # the bad record skipped
    assert replica.positions == {"in:0": len(values)}
    assert replica.applied_total == len(values)


def test_a_batch_path_that_raises_leaves_no_write_behind(store: Any) -> None:
    replica = Replica("Partition 0", ["in:0"], _PoisonsTheBatch(), store, "warmup",
                      {"in:0": 0}, {"in:0": 100})
    replica.apply(_messages(_INPUT))
    replica.commit()
    assert b"poison" not in store.state
    assert (store.state[b"a"], store.state[b"b"], store.state[b"c"]) == (9, 8, 4)


def test_a_replica_stops_a_batch_at_its_cap(store: Any) -> None:
    replica = Replica("Partition 0", ["in:0"], RunningSum(), store, "warmup", {"in:0": 1},
                      {"in:0": 4})
    assert replica.apply(_messages(_INPUT)) == {"in:0"}
    replica.commit()
    assert replica.positions == {"in:0": 4}
    state = store.state
    assert (state[b"a"], state[b"b"], state[b"c"]) == (3, 2, 4)   # offsets 1..3 only


class _Recording:
    """A producer inside a transaction that keeps what it is given."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def losses(self) -> int:
        return 0

    def begin_transaction(self) -> None:
        pass

    def abort_transaction(self, timeout: float) -> None:
        pass

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.sent.append(args + tuple(sorted(kwargs.items())))


def test_an_active_batch_with_a_failing_record_skips_that_record_alone(store: Any) -> None:
    producer = _Recording()
    task = ActiveTask("Partition 0", ["in:0"], RunningSum(), store, producer, "out", "dlq",
                      "skip", lambda: None, {"in:0": 0}, lambda partitions: {})
    outcomes: list[str] = []
    task.on_process_error = lambda name, outcome: outcomes.append(outcome)
    values = [*_INPUT[:3], (b"a", b"not a number"), *_INPUT[3:]]
    task.process(_messages(values))
    # (topic, value, key, partition, on_delivery, callback, timestamp): each input's own timestamp
    assert producer.sent == [
        ("out", b"1", b"a", -1, None, None, 1000), ("out", b"2", b"b", -1, None, None, 1001),
        ("out", b"4", b"a", -1, None, None, 1002), ("out", b"4", b"c", -1, None, None, 1004),
        ("out", b"9", b"a", -1, None, None, 1005), ("out", b"8", b"b", -1, None, None, 1006)]
    assert outcomes == ["skip"]
    assert task.pending == {"in:0": len(values)}
    assert task.transaction.processed == len(values)


def test_an_active_task_skips_what_its_transaction_already_holds(store: Any) -> None:
    producer = _Recording()
    task = ActiveTask("Partition 0", ["in:0"], _PoisonsTheBatch(), store, producer, "out",
                      "dlq", "fail", lambda: None, {"in:0": 2}, lambda partitions: {})
    task.process(_messages(_INPUT))
    assert [sent[2] for sent in producer.sent] == [b"a", b"c", b"a", b"b"]  # offsets 2..5
    assert b"poison" not in store.state
    assert task.pending == {"in:0": 6}


class _OneShort(RunningSum):
    def process_batch(self, records: Sequence[Record], state: State
                      ) -> Iterable[Iterable[Emitted]]:
        return list(super().process_batch(records, state))[:-1]


def test_a_batch_result_short_of_a_record_is_redone_by_process(store: Any) -> None:
    producer = _Recording()
    task = ActiveTask("Partition 0", ["in:0"], _OneShort(), store, producer, "out", "dlq",
                      "fail", lambda: None, {"in:0": 0}, lambda partitions: {})
    task.process(_messages(_INPUT))
    assert [sent[1] for sent in producer.sent] == [b"1", b"2", b"4", b"4", b"9", b"8"]
    assert (store.state[b"a"], store.state[b"b"], store.state[b"c"]) == (9, 8, 4)
