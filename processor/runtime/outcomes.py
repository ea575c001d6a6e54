"""What a step on a task ended in, as an event of its lifecycle (processor/lifecycle.py).

The processor's pieces raise their own exceptions (a store's, a catch-up source's, a
fence's) and a commit returns its outcome (processor/task_transaction.py); this is the
one place that says which event each one is, so the lifecycle table, not the code that
met it, decides what follows.
"""

from __future__ import annotations

from confluent_kafka import KafkaException

from processor.changelog_replica import ChangelogError
from processor.lifecycle import Event
from processor.retention import InputTrimmedError, OffsetOutOfRange
from processor.runtime.activation import StoreAheadError
from processor.runtime.preflight import FenceRefused
from processor.task_transaction import CommitResult, Outcome
from processor.transaction import (
    CommitVoided,
    ProducerFatal,
    TaskFailed,
    TaskFenced,
    TransactionAborted,
)
from store import StoreError

__all__ = ["ROUND_ERRORS", "TASK_ERRORS", "event_of", "event_of_commit"]

# most specific first: the first class an exception is an instance of names its event
_EVENTS: tuple[tuple[type[BaseException], Event], ...] = (
    (TransactionAborted, Event.ABORTED),
    (CommitVoided, Event.VOIDED),
    (ProducerFatal, Event.PRODUCER_LOST),       # CommitHung too: a new producer follows
    (TaskFenced, Event.FENCED),
    (TaskFailed, Event.JOB_FAILED),
    (StoreError, Event.STORE_FAILED),
    (StoreAheadError, Event.STORE_FAILED),
    (InputTrimmedError, Event.INPUT_TRIMMED),
    (ChangelogError, Event.SOURCE_GONE),
    (OffsetOutOfRange, Event.SOURCE_GONE),
    (FenceRefused, Event.FENCE_REFUSED),
    (KafkaException, Event.BROKER_ERROR),
    (OSError, Event.STORE_FAILED),              # the local disk: the state directory
)

# what a change of one task may raise and still leave the other tasks running
TASK_ERRORS: tuple[type[BaseException], ...] = tuple(
    kind for kind, _ in _EVENTS if kind is not TransactionAborted)
# what a step of an active task in a round may raise (a broker error there is the
# consumer's, retried by it, or the daemon's to stop on)
ROUND_ERRORS: tuple[type[BaseException], ...] = (
    TransactionAborted, ProducerFatal, TaskFenced, TaskFailed, StoreAheadError, StoreError)


def event_of(exc: BaseException) -> Event:
    """The lifecycle event `exc` is."""
    for kind, event in _EVENTS:
        if isinstance(exc, kind):
            return event
    raise TypeError(f"{type(exc).__name__} is not an outcome of a task's step") from exc


_COMMIT_EVENTS = {Outcome.COMMITTED: Event.COMMITTED, Outcome.ABORTED: Event.ABORTED,
                  Outcome.FENCED: Event.FENCED, Outcome.VOID: Event.VOIDED,
                  Outcome.FAILED: Event.PRODUCER_LOST}


def event_of_commit(result: CommitResult) -> Event:
    """The lifecycle event a commit's outcome is."""
    return _COMMIT_EVENTS[result.outcome]
