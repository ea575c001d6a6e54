"""An active task: process records and emit output exactly once.

One transactional producer per task (transactional id `baton.<job>.<task>`): outputs and
the input offsets commit in one Kafka transaction, and only after that commit do the
task's state writes reach RocksDB, in one WriteBatch with the same offsets. So the store
may lag the committed offsets by one transaction after a crash (recovery replays the gap
without output) but never leads them. The per-task transactional id is what fences a
zombie owner after a handoff.

With catch_up.source = "changelog" the transaction also carries the task's state changes
and input offsets to its changelog partition (processor/changelog.py), and the store
commits its changelog position with them.

A transaction during which the producer lost its brokers is not trusted: before the commit
it is aborted, over every partition the task writes to, and redone; during the commit, the
group's committed offsets are read back, and a broker that came back without the
transaction restarts the task from what it does hold (orchestrator/kafka/watched_producer.py).
After any abort the last commit is read back too (processor/transaction.py, `CommitVoided`).

A commit runs on a commit thread (processor/runtime/commits.py), and the runtime gives up
on one that does not return in time (`abandon`): a client call can outlive its own
timeout when a broker is lost. The thread may still return later, and by then the task's
next activation owns the store, so from the moment it is abandoned the thread's commit
touches the store no more (`_store_held`): what it committed at the brokers, if
anything, the next activation finds in the committed offsets after its fence.

Each commit also sweeps a slice of the state's expired entries into the transaction
(processor/expiry_sweep.py), by the clocks of the records the task processed.

What the job hands to `context.after_commit` while processing belongs to the open
transaction (`effects`, processor/effects.py): dropped with a record whose process()
raised and with an aborted transaction, due once the commit succeeded; the runtime runs
them on its loop (`run_effects`), never on a commit thread.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

from confluent_kafka import KafkaError, KafkaException, Message

from orchestrator.kafka.offsets import to_topic_partitions
from orchestrator.kafka.retry import kafka_error
from orchestrator.kafka.watched_producer import WatchedProducer
from orchestrator.wire.barrier import Marker, Reroute, skip_marker
from orchestrator.wire.clock import Clock, SystemClock
from orchestrator.wire.partitions import format_partition
from processor.changelog import ChangelogWriter
from processor.effects import AfterCommit, run_effects
from processor.emit import Emitter
from processor.expiry_sweep import ExpirySweep
from processor.job import Effect, Job, Record
from processor.outputs import OutputError, encode_output
from processor.records import (
    collector_paused,
    new_record,
    offsets_of,
    plain_runs,
    run_records,
    window,
)
from processor.timed_job import TimedJob
from processor.timers import TimerError
from processor.transaction import (
    TXN_TIMEOUT_S,
    BrokerLost,
    CommitHung,
    CommitVoided,
    ProducerFatal,
    TaskFailed,
    TaskFenced,
    TransactionAborted,
    abort_everywhere,
    callback_error,
    is_fenced,
    retriable_commit,
    written_topics,
)
from store import Store

__all__ = ["ActiveTask", "ProducerFatal", "TaskFailed", "TaskFenced", "TransactionAborted",
           "encode_output"]

log = logging.getLogger("baton.processor.active")

OnError = Literal["fail", "skip", "dlq"]
# misrouted records are logged at most once per this many seconds per task
_MISROUTE_LOG_S = 60.0
_TIMESTAMP = operator.attrgetter("timestamp")


class ActiveTask:
    """The active role of one task on this processor (owned by the runtime's loop)."""

    def __init__(self, name: str, partitions: Sequence[str], job: Job, store: Store,
                 producer: WatchedProducer, output_topic: str, dlq_topic: str,
                 on_error: OnError, group_metadata: Callable[[], Any],
                 committed: dict[str, int],
                 broker_committed: Callable[[list[str]], dict[str, int]], *,
                 clock: Clock | None = None, changelog: ChangelogWriter | None = None,
                 outputs: Sequence[str] = (), effects: AfterCommit | None = None) -> None:
        self.name = name
        self.partitions = list(partitions)
        self.job = job
        self.store = store
        self._state = store.state             # what process() sees, looked up once
        self.producer = producer
        self.output_topic = output_topic
        # where an Output may go: `output` and `[job] outputs`
        self.emitter = Emitter(producer, output_topic, outputs)
        self.dlq_topic = dlq_topic
        self.on_error = on_error
        self._group_metadata = group_metadata
        self._broker_committed = broker_committed
        self._clock = clock or SystemClock()
        self.changelog = changelog            # catch_up.source = "changelog" only
        # the open transaction's after_commit effects (the job's host adds to it), and
        # those of committed transactions not yet run
        self.effects = AfterCommit() if effects is None else effects
        self.due: list[Effect] = []
        self.sweep = ExpirySweep()
        self._losses = 0                      # the producer's broker losses at begin
        self._abandoned = False               # the runtime gave up on its commit
        self._store_lock = threading.Lock()   # a commit thread's store writes vs abandon
        self.committed = dict(committed)      # T1: the offsets of the last committed txn
        self.pending = dict(committed)        # positions including the open transaction
        self.in_transaction = False
        self.timers_fired = False             # wall-clock timers fired in the open one
        self.processed = 0                    # records in the open transaction
        self.records_total = 0
        # records/s committed over the last second or more (its heartbeat's `rate`: with
        # the loop's busy share, what the autoscaling recommendation sizes processors by)
        self.rate = 0.0
        self._rate_mark = (self._clock.monotonic(), 0)
        self.activated_at: float | None = None
        self.pause_ms: float | None = None
        # when the activation that made it active began and each of its steps ended
        # (processor/handoff_steps.py; "first_read" and "first_commit" are stamped here)
        self.stamps: dict[str, float] = {}
        # told about each record process() failed on, with what on_error did (metrics); of
        # a commit the store applied that the brokers took back (`CommitVoided`), at once
        self.on_process_error: Callable[[str, OnError], None] = lambda task, outcome: None
        self.on_effect_error: Callable[[str], None] = lambda task: None
        self.on_voided: Callable[[str], None] = lambda task: None
        self.fenced = False     # a fencing error was seen (later calls fail bare: fatal)
        # expansion barriers (orchestrator/wire/barrier.py): whose markers count, parents whose
        # misrouted records go to a child, who hears of a marker not yet in the model
        self.job_name = ""
        self.reroutes: dict[str, Reroute] = {}
        self.on_marker: Callable[[str, int, Marker], None] = lambda partition, offset, m: None
        self.on_misrouted: Callable[[str, str, str], None] = lambda task, source, child: None
        self.misrouted_total = 0
        self._misroute_logged: tuple[float, int] = (-_MISROUTE_LOG_S, 0)

    def process(self, messages: Sequence[Message]) -> None:
        """Run process() over one poll batch's records of this task, inside a transaction.

        Raises:
            TaskFenced: the producer failed fatally while the batch was produced (a
                newer owner fenced it: a produce after that answers a bare fatal error);
                the transaction is void, the task stops.
            TaskFailed: process() raised under on_error = "fail", or an output could
                not be produced (e.g. too large): the task stops at its committed offsets.
        """
        try:
            with collector_paused():
                self._process(messages)
        except (KafkaException, SystemError) as exc:
            raise self._producer_failure(callback_error(exc)) from exc

    def _producer_failure(self, exc: KafkaException) -> Exception:
        """What a producer error met while processing means for the task. A fatal one
        is taken for a fence: restarting it could fence the task's real new owner."""
        err = kafka_error(exc)
        fatal = err is not None and (is_fenced(exc) or err.fatal()
                                     or err.code() == KafkaError._FATAL)
        self.fenced = self.fenced or fatal
        self.abort()
        if fatal:
            return TaskFenced(f"task {self.name!r}: the producer failed fatally while "
                              f"producing (fenced by a newer owner, most likely); its open "
                              f"transaction is void: {exc}")
        return TaskFailed(f"task {self.name!r}: producing its output failed: {exc}; the "
                          f"task stopped at its committed offsets")

    def _process(self, messages: Sequence[Message]) -> None:
        if self.pause_ms is None and self.stamps and "first_read" not in self.stamps:
            self.stamps["first_read"] = self._clock.monotonic()
        self.open_transaction()
        pending, reroutes = self.pending, self.reroutes
        for run, plain in plain_runs(messages, errors=False):   # by_task took them out
            first = run[0]
            name = format_partition(first.topic(), first.partition()) if plain else ""
            if not plain or name in reroutes:
                self._process_each(run)
                continue
            offsets = offsets_of(run)
            lo, hi = window(offsets, pending.get(name, 0), offsets[-1] + 1)
            if lo >= hi:
                continue                      # already in this transaction or committed
            if lo:
                run, offsets = run[lo:], offsets[lo:]
            records = run_records(run, offsets)
            if records is None:               # a record without key: a marker?
                self._process_each(run)
                continue
            self._process_records(records)
            self.sweep.saw(name, map(_TIMESTAMP, records))
            pending[name] = offsets[-1] + 1
            self.processed += len(records)

    def open_transaction(self) -> None:
        """Begin the task's transaction, unless one is open."""
        if not self.in_transaction:
            self._losses = self.producer.losses()
            self.producer.begin_transaction()
            self.in_transaction = True

    def fire_timers(self, now_ms: int) -> int:
        """Fire the job's wall-clock timers due at `now_ms` (ms since the epoch) in the
        open transaction, each with its outputs (stamped `now_ms` unless they say
        otherwise); return how many fired (processor/timers.py).

        Raises:
            TaskFailed: on_timer() raised: the task stops at its committed offsets.
        """
        job = self.job
        if not isinstance(job, TimedJob) or not job.timers.wall:
            return 0
        due = job.next_wall(self._state)
        if due is None or due > now_ms:
            return 0
        self.open_transaction()
        fired = 0
        while True:
            self.store.begin_record()
            self.effects.begin_record()
            try:
                done = job.fire_wall(now_ms, self._state)
            except TimerError as exc:
                self.abort()
                raise TaskFailed(f"task {self.name!r}: {exc}; the task stopped at its "
                                 f"committed offsets") from exc
            if done is None:
                return fired
            timer, outputs = done
            self.timers_fired = True
            fired += 1
            self._emit(self.emitter.emit_one, new_record(
                timer.key, None, "", -1, -1, now_ms, ()), outputs)

    def _process_records(self, records: Sequence[Record]) -> None:
        """process_batch() over consecutive records of one partition, then their
        outputs; if it raises, the batch is undone and processed record by record, so
        on_error meets the record that failed (nothing was produced yet)."""
        store, effects = self.store, self.effects
        store.begin_record()
        effects.begin_record()
        try:
            results = list(map(list, self.job.process_batch(records, self._state)))
            if len(results) != len(records):    # not one result per record: not trusted
                raise ValueError(f"process_batch() gave {len(results)} results")
        except Exception:  # noqa: BLE001 - user code: redone one record at a time below
            store.rollback_record()
            effects.rollback_record()
            for record in records:
                self._process_record(record)
            return
        self._emit(self.emitter.emit, records, results)

    def _process_each(self, messages: Sequence[Message]) -> None:
        """Process records one at a time: markers, reroutes, runs of two topics."""
        pending = self.pending
        # a poll batch comes in runs of one partition: name it once per run
        topic: str | None = None
        number, name = -1, ""
        reroute: Reroute | None = None
        for msg in messages:
            offset = msg.offset()
            t, p = msg.topic(), msg.partition()
            if p != number or t != topic:
                topic, number, name = t, p, format_partition(t, p)
                reroute = self.reroutes.get(name)
            if offset < pending.get(name, 0):
                continue                      # already in this transaction or committed
            key = msg.key()
            if key is None and skip_marker(self.job_name, msg, name, self.on_marker):
                reroute = self.reroutes.get(name)     # a marker may have settled a barrier
            elif reroute is not None and offset > reroute.first \
                    and (child := reroute.target(key, offset)) is not None:
                self._forward(msg, name, child)
            else:
                stamp = msg.timestamp()[1]
                self._process_record(new_record(key, msg.value(), t, p, offset, stamp,
                                                msg.headers() or ()))
                self.sweep.saw(name, (stamp,))
            pending[name] = offset + 1
            self.processed += 1

    def _forward(self, msg: Message, source: str, child: str) -> None:
        """A record a producer staler than the expansion grace wrote to a parent past
        its barrier: it goes, unchanged, to the child partition its key belongs to,
        inside this transaction; it never touches this task's state."""
        self.emitter.forward(msg, f"{source}@{msg.offset()}", child)
        self.misrouted_total += 1
        self.on_misrouted(self.name, source, child)
        now = self._clock.monotonic()
        logged_at, logged_count = self._misroute_logged
        if now - logged_at >= _MISROUTE_LOG_S:
            log.warning("task %r: %d record(s) arrived on %s past its expansion barrier with "
                        "keys of %s (the latest: offset %d), written by a producer whose "
                        "metadata is older than [job] expansion_grace_ms; forwarded to %s. "
                        "Make producers refresh metadata sooner (librdkafka "
                        "topic.metadata.refresh.interval.ms, Java metadata.max.age.ms)",
                        self.name, self.misrouted_total - logged_count, source, child,
                        msg.offset(), child)
            self._misroute_logged = (now, self.misrouted_total)

    def _process_record(self, record: Record) -> None:
        """process() over one record, its outputs produced, or on_error applied."""
        store, effects = self.store, self.effects
        store.begin_record()
        effects.begin_record()
        store.now = record.timestamp
        try:
            outputs = list(self.job.process(record, self._state))
        except Exception as exc:  # noqa: BLE001 - user code: every failure goes to on_error
            store.rollback_record()
            effects.rollback_record()
            self._on_error(record, exc)
            return
        self._emit(self.emitter.emit_one, record, outputs)

    def _emit(self, emit: Callable[..., None], *args: Any) -> None:
        """`emit(*args, on_bad)`. A record whose `Output`s do not check (an undeclared
        topic) before any of them was produced goes through on_error: its state writes
        stand (replicas never look at outputs, and keep them too). If some of its
        outputs were already produced (they cannot be taken back), the task stops
        whatever on_error says."""
        try:
            emit(*args, self._on_error)
        except OutputError as exc:
            self.abort()
            raise TaskFailed(f"task {self.name!r}: {exc}; the record's earlier outputs were "
                             f"produced, so the task stopped at its committed offsets") \
                from exc

    def _on_error(self, record: Record, exc: Exception) -> None:
        where = f"{record.topic}:{record.partition} offset {record.offset}"
        self.on_process_error(self.name, self.on_error)
        if self.on_error == "fail" or isinstance(exc, TimerError):   # no record to skip
            self.abort()
            raise TaskFailed(f"task {self.name!r}: process() raised at {where}: {exc!r}; "
                             f"the task stopped at its committed offsets (on_error=fail)") from exc
        if self.on_error == "skip":
            log.warning("task %r: skipped the record at %s: process() raised %r (on_error=skip)",
                        self.name, where, exc)
            return
        headers = [("baton.error", repr(exc).encode()[:4000]),
                   ("baton.source", where.encode()), ("baton.task", self.name.encode())]
        self.emitter.produce(self.dlq_topic, record.key, record.value, headers)
        log.warning("task %r: sent the record at %s to %s: process() raised %r (on_error=dlq)",
                    self.name, where, self.dlq_topic, exc)

    def commit(self) -> int:
        """Commit the open transaction (outputs + offsets), then the store; its
        after_commit effects are then due (`run_effects`).

        Returns:
            The number of input records the commit covered (0: nothing was open).
        """
        if not self.in_transaction:
            return 0
        offsets = {p: o for p, o in self.pending.items() if o != self.committed.get(p)}
        # wall-clock timers change the state without an input record
        changed, self.timers_fired = bool(offsets) or self.timers_fired, False
        try:
            if offsets:
                self.sweep.run(self.store, [*self.partitions, *self.pending],
                               self._clock.monotonic())
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
        self.in_transaction = False
        if offsets and self.producer.losses() != losses:
            self._verify_committed(offsets)
        with self._store_held():
            if self.changelog is not None and changed:   # its records went into this one
                self.store.commit({**offsets, **self.changelog.committed()},
                                  self.changelog.changes)
            else:
                self.store.commit(offsets)
        self.committed.update(offsets)
        self.due.extend(self.effects.take())
        committed, self.processed = self.processed, 0
        self.records_total += committed
        if self.activated_at is not None and self.pause_ms is None and offsets:
            now = self._clock.monotonic()
            self.pause_ms = (now - self.activated_at) * 1000
            if self.stamps:
                self.stamps["first_commit"] = now
        return committed

    def abandon(self) -> None:
        """The runtime gave up waiting on this task's commit: whenever its thread returns,
        it leaves the store alone (the module doc). Waits for a store write under way."""
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

    def run_effects(self) -> None:
        """Run the committed transactions' effects, on the caller's thread (the loop)."""
        if self.due:
            due, self.due = self.due, []
            run_effects(self.name, due, self.on_effect_error, self._clock)

    def update_rate(self) -> float:
        """Records/s committed since the last update at least a second ago."""
        now = self._clock.monotonic()
        then, count = self._rate_mark
        if now - then >= 1.0:
            self.rate = (self.records_total - count) / (now - then)
            self._rate_mark = (now, self.records_total)
        return self.rate

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
        self.in_transaction = False
        with self._store_held():
            self.store.abort()
        self.effects.drop()
        self.pending = dict(self.committed)
        if isinstance(exc, KafkaException):
            self._unless_abortable(exc)
        try:
            self.producer.abort_transaction(TXN_TIMEOUT_S)
            if isinstance(exc, BrokerLost):
                abort_everywhere(self.producer, written_topics(
                    self.output_topic, self.emitter.output_topics,
                    self.dlq_topic if self.on_error == "dlq" else None),
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
        if self.in_transaction:
            self.in_transaction = False
            self.processed = 0
            if self._abandoned:     # its commit thread still holds the producer's call
                return
            try:
                self.producer.abort_transaction(TXN_TIMEOUT_S)
            except (KafkaException, SystemError) as failure:
                self.fenced = self.fenced or is_fenced(callback_error(failure))
                log.warning("task %r: abort_transaction failed: %s", self.name, failure)
