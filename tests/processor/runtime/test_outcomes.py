"""What a task's step raised, as the lifecycle event it is (processor/runtime/outcomes.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from processor.changelog_replica import ChangelogError
from processor.lifecycle import Event
from processor.retention import InputTrimmedError, OffsetOutOfRange
from processor.runtime.activation import StoreAheadError
from processor.runtime.outcomes import ROUND_ERRORS, TASK_ERRORS, event_of
from processor.runtime.preflight import FenceRefused
from processor.transaction import (
    CommitHung,
    ProducerFatal,
    TaskFailed,
    TaskFenced,
    TransactionAborted,
)
from store import StoreError, StoreLockedError

CASES = [
    (TransactionAborted("t"), Event.ABORTED),
    (ProducerFatal("t"), Event.PRODUCER_LOST),
    (CommitHung("t"), Event.PRODUCER_LOST),
    (TaskFenced("t"), Event.FENCED),
    (TaskFailed("t"), Event.JOB_FAILED),
    (StoreError("/state/t", "write failed"), Event.STORE_FAILED),
    (StoreLockedError("/state/t", "locked"), Event.STORE_FAILED),
    (StoreAheadError("t"), Event.STORE_FAILED),
    (OSError(28, "No space left on device"), Event.STORE_FAILED),
    (InputTrimmedError("in:0", 10, 50, "t"), Event.INPUT_TRIMMED),
    (ChangelogError("t"), Event.SOURCE_GONE),
    (OffsetOutOfRange("in:0", 10, "gone"), Event.SOURCE_GONE),
    (FenceRefused("t"), Event.FENCE_REFUSED),
    (KafkaException(KafkaError(KafkaError._TRANSPORT)), Event.BROKER_ERROR),
]


@pytest.mark.parametrize(("exc", "event"), CASES, ids=[type(e).__name__ for e, _ in CASES])
def test_each_error_is_one_event(exc: BaseException, event: Event) -> None:
    assert event_of(exc) is event


def test_a_change_catches_every_error_but_an_abort_and_a_round_a_subset() -> None:
    assert TransactionAborted not in TASK_ERRORS
    assert all(isinstance(e, TASK_ERRORS) for e, _ in CASES
               if not isinstance(e, TransactionAborted))
    assert set(ROUND_ERRORS) - {TransactionAborted} <= set(TASK_ERRORS)


def test_anything_else_is_not_an_outcome() -> None:
    with pytest.raises(TypeError, match="ValueError"):
        event_of(ValueError("x"))
