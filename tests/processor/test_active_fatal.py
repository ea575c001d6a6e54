"""An active task whose producer turns fatal under it (a newer owner fenced it) stops
as fenced, whether produce() or begin_transaction() is the call that finds out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from processor.active import ActiveTask, TaskFailed, TaskFenced
from processor.examples import RunningSum
from processor.job import Emitted, Job, Output, Record, State
from processor.task_transaction import Outcome
from store import TaskStore


class Msg:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset

    def topic(self) -> str:
        return "in"

    def partition(self) -> int:
        return 0

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"1"

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)

    def headers(self) -> None:
        return None


class FatalProducer:
    def __init__(self, where: str, error: KafkaError) -> None:
        self.where, self.error = where, error

    def losses(self) -> int:
        return 0

    def begin_transaction(self) -> None:
        if self.where == "begin":
            raise KafkaException(self.error)

    def produce(self, *args: Any, **kwargs: Any) -> None:
        raise KafkaException(self.error)

    def abort_transaction(self, timeout: float) -> None:
        raise KafkaException(self.error)


def _task(tmp_path: Path, producer: Any) -> ActiveTask:
    return ActiveTask("Partition 0", ["in:0"], RunningSum(), TaskStore(tmp_path / "s"),
                      producer, "out", "dlq", "fail", lambda: None, {"in:0": 0},
                      lambda partitions: {})


@pytest.mark.parametrize("where", ["produce", "begin"])
@pytest.mark.parametrize("error", [
    KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error"),
    KafkaError(KafkaError._FENCED, "fenced", fatal=True)], ids=["fatal", "fenced"])
def test_a_fatal_producer_stops_the_task_as_fenced(tmp_path, where, error) -> None:
    task = _task(tmp_path, FatalProducer(where, error))
    with pytest.raises(TaskFenced, match="failed fatally"):
        task.process([Msg(0)])
    task.store.close()


def test_other_produce_errors_are_not_taken_for_a_fence(tmp_path) -> None:
    """The task stops failed (reported, re-placed by the coordinator), not fenced."""
    task = _task(tmp_path, FatalProducer("produce", KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))
    with pytest.raises(TaskFailed, match="producing its output failed"):
        task.process([Msg(0)])
    task.store.close()


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


class _ToElsewhere(Job):
    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        yield record.key, b"pair"
        yield Output(record.key, b"out", headers=[("h", "v")])
        yield Output(record.key, b"x", topic="elsewhere")


class _OutputsOnly(Job):
    """Counts the records it saw in state, then yields Outputs only."""

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        state["seen"] = state.get("seen", 0) + 1
        yield Output(record.key, b"out", headers=[("h", "v")])
        yield Output(record.key, b"x", topic="elsewhere")


def _recording_task(tmp_path: Path, job: Job, on_error: Any, outputs: tuple[str, ...] = ()
                    ) -> tuple[ActiveTask, _Recording]:
    producer = _Recording()
    task = ActiveTask("Partition 0", ["in:0"], job, TaskStore(tmp_path / "s"), producer,
                      "out", "dlq", on_error, lambda: None, {"in:0": 0},
                      lambda partitions: {}, outputs=outputs)
    return task, producer


def test_outputs_carry_the_input_timestamp_and_an_undeclared_topic_fails_the_task(
        tmp_path) -> None:
    """A pair of the record was produced before the bad Output: it cannot be taken
    back, so the task stops even under on_error = "skip"."""
    task, producer = _recording_task(tmp_path, _ToElsewhere(), "skip")
    with pytest.raises(TaskFailed, match="'elsewhere'"):
        task.process([Msg(0)])
    task.store.close()
    assert producer.sent == [("out", b"pair", b"k", -1, None, None, 0)]  # Msg's timestamp: 0


def test_a_declared_output_topic_takes_outputs(tmp_path) -> None:
    task, producer = _recording_task(tmp_path, _ToElsewhere(), "fail", ("elsewhere",))
    task.process([Msg(0)])
    task.store.close()
    assert producer.sent == [
        ("out", b"pair", b"k", -1, None, None, 0),
        ("out", ("headers", [("h", b"v")]), ("key", b"k"), ("timestamp", 0),
         ("value", b"out")),
        ("elsewhere", ("headers", None), ("key", b"k"), ("timestamp", 0), ("value", b"x"))]


@pytest.mark.parametrize("on_error", ["skip", "dlq"])
def test_an_undeclared_topic_goes_through_on_error_with_no_output_produced(
        tmp_path, on_error) -> None:
    task, producer = _recording_task(tmp_path, _OutputsOnly(), on_error)
    outcomes: list[str] = []
    task.on_process_error = lambda name, outcome: outcomes.append(outcome)
    task.process([Msg(0)])
    assert task.store.state.get("seen") == 1      # its writes stand, as on replicas (no outputs)
    assert outcomes == [on_error]
    task.store.close()
    sent_to = [sent[0] for sent in producer.sent]
    assert sent_to == ([] if on_error == "skip" else ["dlq"])
    if on_error == "dlq":
        headers = dict(producer.sent[0][1][1])
        assert b"elsewhere" in headers["baton.error"]


def test_an_undeclared_topic_under_fail_stops_the_task_with_nothing_produced(tmp_path) -> None:
    task, producer = _recording_task(tmp_path, _OutputsOnly(), "fail")
    with pytest.raises(TaskFailed, match="'elsewhere'.*on_error=fail"):
        task.process([Msg(0)])
    task.store.close()
    assert producer.sent == []


class _FencedInACallback(_Recording):
    """A producer that loses its brokers inside the commit, and whose flush while the
    task aborts over every partition meets the fence through a callback: confluent-kafka
    raises it as a SystemError whose cause is the fence, as a processor met it under a
    soak's broker restarts on Apache Kafka 4.4."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0
        self.aborted = False

    def losses(self) -> int:
        return self.lost

    def flush(self, timeout: float) -> int:
        if self.aborted:
            wrapped = SystemError("<class 'logging.LogRecord'> returned a result with an "
                                  "exception set")
            wrapped.__cause__ = KafkaException(KafkaError(KafkaError._FENCED, "fenced",
                                                          fatal=True))
            raise wrapped
        return 0

    def send_offsets_to_transaction(self, *args: Any) -> None:
        self.lost = 1                           # the broker restarts inside the commit

    def abort_transaction(self, timeout: float) -> None:
        self.aborted = True

    def list_topics(self, topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions={0: None})})


def test_a_fence_met_through_a_callback_while_aborting_stops_the_task_as_fenced(
        tmp_path) -> None:
    """Not a SystemError out of the processor's loop, which stopped the daemon."""
    producer = _FencedInACallback()
    task = ActiveTask("Partition 0", ["in:0"], RunningSum(), TaskStore(tmp_path / "s"),
                      producer, "out", "dlq", "fail", lambda: None, {"in:0": 0},
                      lambda partitions: {})
    task.process([Msg(0)])
    ended = task.commit()
    assert ended.outcome is Outcome.FENCED
    assert isinstance(ended.error, TaskFenced) and "fenced while aborting" in str(ended.error)
    task.store.close()
