"""One task's transaction, from begin to the store: the commit unit.

An active task (processor/active.py) produces into its open transaction; this unit owns
the rest of it, in order: begin; at the commit, the changelog's records (catch_up.source
= "changelog"), the outputs flushed, the input offsets sent, the commit itself (again
once after a retriable failure); after a failure, the abort (over every partition the
task writes, after a broker loss) and the check that the brokers hold the last commit;
and only then the store's WriteBatch with the same offsets. So the store may lag the
committed offsets by one transaction after a crash (recovery replays the gap without
output) but never leads them.

`commit()` returns a `CommitResult`: committed (with its record count), or how it ended
otherwise, which the task's lifecycle (processor/lifecycle.py) decides on:

- committed: outputs, offsets and store hold the transaction; the task goes on;
- aborted: aborted, and the brokers hold the previous commit; the task rewinds to T1
  and goes on;
- fenced: another owner's producer took the transactional id; the task stops and is
  reported failed;
- void: the brokers do not hold a commit the store applied (`CommitVoided`); the task
  restarts, settling its partitions and rebuilding the store;
- failed: the producer failed fatally, a commit's outcome is unknown, or the commit
  hung; the task restarts with a new producer, whose fence ends the old one.

A commit runs on a commit thread (processor/runtime/commits.py), and the runtime gives up
on one that does not return in time (`abandon`): a client call can outlive its own
timeout when a broker is lost. The thread may still return later, and by then the task's
next activation owns the store, so from the moment it is abandoned the thread's commit
touches the store no more (`_store_held`): what it committed at the brokers, if
anything, the next activation finds in the committed offsets after its fence.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from orchestrator.kafka.offsets import to_topic_partitions
from orchestrator.kafka.retry import kafka_error
from orchestrator.kafka.watched_producer import WatchedProducer
from orchestrator.wire.clock import Clock
from processor.changelog import ChangelogWriter
from processor.effects import AfterCommit
from processor.transaction import (
    TXN_TIMEOUT_S,
    BrokerLost,
    CommitHung,
    CommitVoided,
    ProducerFatal,
    TaskFenced,
    TransactionAborted,
    abort_everywhere,
    callback_error,
    is_fenced,
    retriable_commit,
)
from store import Store

__all__ = ["CommitResult", "Outcome", "TaskTransaction"]

log = logging.getLogger("baton.processor.active")


class Outcome(enum.Enum):
    """How a commit ended (the module doc's table)."""

    COMMITTED = "committed"
    ABORTED = "aborted"
    FENCED = "fenced"
    VOID = "void"
    FAILED = "failed"


@dataclass(frozen=True)
class CommitResult:
    """A commit's outcome; `records`: the input records it covered (committed);
    `error`: why it did not commit (its message is what the task reports)."""

    outcome: Outcome
    records: int = 0
    error: Exception | None = None

    @property
    def committed(self) -> bool:
        return self.outcome is Outcome.COMMITTED

    @staticmethod
    def of(exc: Exception) -> CommitResult:
        """The outcome a commit's exception stands for (most specific first)."""
        for kind, outcome in ((CommitVoided, Outcome.VOID), (ProducerFatal, Outcome.FAILED),
                              (TaskFenced, Outcome.FENCED),
                              (TransactionAborted, Outcome.ABORTED)):
            if isinstance(exc, kind):
                return CommitResult(outcome, error=exc)
        raise TypeError(f"{type(exc).__name__} is not a commit's outcome") from exc


class TaskTransaction:
    """One task's transactions, one after the other (the module doc).

    Args:
        name: the task.
        producer: its transactional producer.
        store: its store, written in the same unit as the offsets.
        written: every topic its transactions may write (an abort after a broker loss
            names all of their partitions again).
        group_metadata: the group's metadata, for the offsets sent with a commit.
        broker_committed: reads the group's committed offsets of some partitions.
        committed: T1, the offsets it starts from.
        clock: waits before a commit's retry.
        changelog: its changelog (catch_up.source = "changelog").
        effects: the open transaction's after_commit effects.
    """

    def __init__(self, name: str, producer: WatchedProducer, store: Store,
                 written: Sequence[str], group_metadata: Callable[[], Any],
                 broker_committed: Callable[[list[str]], dict[str, int]],
                 committed: dict[str, int], clock: Clock,
                 changelog: ChangelogWriter | None, effects: AfterCommit) -> None:
        self.name = name
        self.producer = producer
        self.store = store
        self.changelog = changelog
        self.effects = effects
        self._written = list(written)
        self._group_metadata = group_metadata
        self._broker_committed = broker_committed
        self._clock = clock
        self.committed = dict(committed)      # T1: the offsets of the last committed txn
        self.pending = dict(committed)        # positions including the open transaction
        self.open = False
        self.timers_fired = False             # wall-clock timers fired in the open one
        self.processed = 0                    # records in the open transaction
        self._losses = 0                      # the producer's broker losses at begin
        self._abandoned = False               # the runtime gave up on its commit
        self._store_lock = threading.Lock()   # a commit thread's store writes vs abandon
        # told at once of a commit the store applied that the brokers took back
        self.on_voided: Callable[[str], None] = lambda task: None

    def begin(self) -> None:
        """Begin the transaction, unless one is open."""
        if not self.open:
            self._losses = self.producer.losses()
            self.producer.begin_transaction()
            self.open = True

    def changed_offsets(self) -> dict[str, int]:
        """The input offsets the open transaction moves past T1."""
        return {p: o for p, o in self.pending.items() if o != self.committed.get(p)}

    def commit(self) -> CommitResult:
        """Commit the open transaction (outputs + offsets), then the store; its
        after_commit effects are then due (`AfterCommit.take`, by the caller)."""
        if not self.open:
            return CommitResult(Outcome.COMMITTED)
        try:
            return CommitResult(Outcome.COMMITTED, self._commit())
        except (TransactionAborted, TaskFenced, ProducerFatal) as exc:
            return CommitResult.of(exc)

    def _commit(self) -> int:
        offsets = self.changed_offsets()
        # wall-clock timers change the state without an input record
        changed, self.timers_fired = bool(offsets) or self.timers_fired, False
        try:
            if changed:
                if self.changelog is not None:
                    self.changelog.write(self.producer, self.store, offsets, self.committed)
                # outputs delivered before the offsets: a restart mid-commit keeps all or none
                self.producer.flush(TXN_TIMEOUT_S)
            if offsets:
                self.producer.send_offsets_to_transaction(
                    to_topic_partitions(offsets), self._group_metadata(), TXN_TIMEOUT_S)
            losses = self.producer.losses()
            if losses != self._losses:
                raise BrokerLost()
            self._commit_transaction()
        except (KafkaException, BrokerLost) as exc:
            self._after_failed_commit(exc)
        except SystemError as exc:
            self._after_failed_commit(callback_error(exc))
        self.open = False
        if offsets and self.producer.losses() != losses:
            self._verify_committed(offsets)
        with self._store_held():
            if self.changelog is not None and changed:   # its records went into this one
                self.store.commit({**offsets, **self.changelog.committed()},
                                  self.changelog.changes)
            else:
                self.store.commit(offsets)
        self.committed.update(offsets)
        committed, self.processed = self.processed, 0
        return committed

    def abandon(self) -> None:
        """The runtime gave up waiting on this commit: whenever its thread returns, it
        leaves the store alone (the module doc). Waits for a store write under way."""
        with self._store_lock:
            self._abandoned = True

    @contextlib.contextmanager
    def _store_held(self) -> Iterator[None]:
        """A commit thread's store step, unless the commit was given up meanwhile."""
        with self._store_lock:
            if self._abandoned:
                raise CommitHung(f"task {self.name!r}: its commit returned after it was "
                                 "given up; the store is its next activation's")
            yield

    def _commit_transaction(self) -> None:
        """Commit, again 100 ms after a retriable failure (not with tenacity: its wrapper
        leaves a reference cycle behind each call, ten a second; docs/performance.md)."""
        try:
            self.producer.commit_transaction(TXN_TIMEOUT_S)
        except KafkaException as exc:
            if not retriable_commit(exc):
                raise
            self._clock.sleep(0.1)
            self.producer.commit_transaction(TXN_TIMEOUT_S)

    def _verify_committed(self, offsets: dict[str, int], applied: bool = False) -> None:
        """Do the brokers hold the commit of `offsets` (`applied`: the store holds it)? One
        whose markers they skipped never settles: the lookup fails, the activation resettles."""
        try:
            held: dict[str, int] | str = self._broker_committed(list(offsets))
        except KafkaException as exc:
            held = f"unknown: {exc}"
        if held == offsets:
            return
        with self._store_held():
            self.store.abort()
            if applied:
                self.on_voided(self.name)   # a store that must not be served again here
        self.effects.drop()         # whether the transaction committed is unknown
        self.pending = dict(self.committed)
        raise (CommitVoided if applied else ProducerFatal)(
            f"task {self.name!r}: the brokers do not hold its last commit (committed {held}, "
            f"expected {offsets}); the task restarts from the committed offsets")

    def _after_failed_commit(self, exc: KafkaException | BrokerLost) -> None:
        self.open = False
        with self._store_held():
            self.store.abort()
        self.effects.drop()
        self.pending = dict(self.committed)
        if isinstance(exc, KafkaException):
            self._unless_abortable(exc)
        try:
            self.producer.abort_transaction(TXN_TIMEOUT_S)
            if isinstance(exc, BrokerLost):
                abort_everywhere(self.producer, self._written,
                                 None if self.changelog is None else self.changelog.target)
        except (KafkaException, SystemError) as failure:
            abort_exc = callback_error(failure)
            if is_fenced(abort_exc):
                raise TaskFenced(f"task {self.name!r}: fenced while aborting: {abort_exc}") \
                    from abort_exc
            raise ProducerFatal(f"task {self.name!r}: abort failed ({abort_exc}); the task "
                                f"restarts from its committed offsets") from abort_exc
        self._verify_committed(dict(self.committed), applied=True)     # module doc
        reason = "the producer lost its brokers inside it" if isinstance(exc, BrokerLost) \
            else str(exc)
        raise TransactionAborted(f"task {self.name!r}: transaction aborted: {reason}") from exc

    def _unless_abortable(self, exc: KafkaException) -> None:
        """Raise what a commit failure means, unless aborting the transaction is the cure."""
        if is_fenced(exc):
            raise TaskFenced(f"task {self.name!r}: producer fenced by a newer owner; "
                             f"its open transaction is void: {exc}") from exc
        err = kafka_error(exc)
        if err is None or not err.txn_requires_abort():
            # fatal, or still failing after the retries (a broker that restarted may have lost
            # the transaction): whether it committed is unknown, so start over from T1
            raise ProducerFatal(f"task {self.name!r}: commit failed ({exc}); the task restarts"
                                f" from its committed offsets with a new producer") from exc

    def abort(self) -> None:
        """Drop the open transaction's outputs, state and effects; positions go back
        to T1."""
        self.store.abort()
        self.effects.drop()
        self.pending = dict(self.committed)
        self.timers_fired = False
        if self.open:
            self.open = False
            self.processed = 0
            if self._abandoned:     # its commit thread still holds the producer's call
                return
            try:
                self.producer.abort_transaction(TXN_TIMEOUT_S)
            except (KafkaException, SystemError) as failure:
                log.warning("task %r: abort_transaction failed: %s", self.name, failure)
