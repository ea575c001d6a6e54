"""An active task: process records and emit output exactly once.

One transactional producer per task (transactional id `baton.<job>.<task>`): outputs and
the input offsets commit in one Kafka transaction, and only after that commit do the
task's state writes reach RocksDB, in one WriteBatch with the same offsets; the commit
unit, `TaskTransaction` (processor/task_transaction.py), owns that sequence and says how
each commit ended. The per-task transactional id is what fences a zombie owner after a
handoff.

With catch_up.source = "changelog" the transaction also carries the task's state changes
and input offsets to its changelog partition (processor/changelog.py), and the store
commits its changelog position with them.

Each commit also sweeps a slice of the state's expired entries into the transaction
(processor/expiry_sweep.py), by the clocks of the records the task processed.

What the job hands to `context.after_commit` while processing belongs to the open
transaction (`effects`, processor/effects.py): dropped with a record whose process()
raised and with an aborted transaction, due once the commit succeeded; the runtime runs
them on its loop (`run_effects`), never on a commit thread.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from typing import Any, Literal

from confluent_kafka import KafkaError, KafkaException, Message

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
from processor.task_transaction import CommitResult, TaskTransaction
from processor.timed_job import TimedJob
from processor.timers import TimerError
from processor.transaction import (
    ProducerFatal,
    TaskFailed,
    TaskFenced,
    TransactionAborted,
    callback_error,
    is_fenced,
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
        self._clock = clock or SystemClock()
        self.changelog = changelog            # catch_up.source = "changelog" only
        # the open transaction's after_commit effects (the job's host adds to it), and
        # those of committed transactions not yet run
        self.effects = AfterCommit() if effects is None else effects
        self.due: list[Effect] = []
        self.sweep = ExpirySweep()
        self.transaction = TaskTransaction(
            name, producer, store,
            written_topics(output_topic, self.emitter.output_topics,
                           dlq_topic if on_error == "dlq" else None),
            group_metadata, broker_committed, committed, self._clock, changelog,
            self.effects)
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
        # told about each record process() failed on, with what on_error did (metrics)
        self.on_process_error: Callable[[str, OnError], None] = lambda task, outcome: None
        self.on_effect_error: Callable[[str], None] = lambda task: None
        # expansion barriers (orchestrator/wire/barrier.py): whose markers count, parents whose
        # misrouted records go to a child, who hears of a marker not yet in the model
        self.job_name = ""
        self.reroutes: dict[str, Reroute] = {}
        self.on_marker: Callable[[str, int, Marker], None] = lambda partition, offset, m: None
        self.on_misrouted: Callable[[str, str, str], None] = lambda task, source, child: None
        self.misrouted_total = 0
        self._misroute_logged: tuple[float, int] = (-_MISROUTE_LOG_S, 0)

    @property
    def committed(self) -> dict[str, int]:
        """T1: the offsets of the last committed transaction."""
        return self.transaction.committed

    @property
    def pending(self) -> dict[str, int]:
        """The positions including the open transaction's records."""
        return self.transaction.pending

    @property
    def in_transaction(self) -> bool:
        return self.transaction.open

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
        transaction = self.transaction
        transaction.begin()
        pending, reroutes = transaction.pending, self.reroutes
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
            transaction.processed += len(records)

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
        self.transaction.begin()
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
            self.transaction.timers_fired = True
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
        transaction = self.transaction
        pending = transaction.pending
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
            transaction.processed += 1

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
        self._state.now = record.timestamp
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

    def commit(self) -> CommitResult:
        """Commit the open transaction (outputs + offsets), then the store; its
        after_commit effects are then due (`run_effects`). Returns how it ended, with
        the number of input records it covered (processor/task_transaction.py)."""
        transaction = self.transaction
        was_open = transaction.open
        moved = was_open and bool(transaction.changed_offsets())
        if moved:
            self.sweep.run(self.store, [*self.partitions, *transaction.pending],
                           self._clock.monotonic())
        result = transaction.commit()
        if not (result.committed and was_open):
            return result
        self.due.extend(self.effects.take())
        self.records_total += result.records
        if self.activated_at is not None and self.pause_ms is None and moved:
            now = self._clock.monotonic()
            self.pause_ms = (now - self.activated_at) * 1000
            if self.stamps:
                self.stamps["first_commit"] = now
        return result

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

    def abort(self) -> None:
        """Drop the open transaction's outputs, state and effects; positions go back
        to T1."""
        self.transaction.abort()
