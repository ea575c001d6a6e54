"""A replica rebuilds a task's state by replaying its input through `process()`.

(`Replay` is what every replay shares; with catch_up.source = "changelog" the
replay is a `ChangelogReplica` instead, processor/changelog_replica.py.)

Three uses, one mechanism: a **warmup** (a future owner catching up), a **standby**
(kept warm indefinitely) and the catch-up an owner does while **activating** (replay
T2 -> final T1 before producing output). A replica never applies a record at or past
its cap, the owner's committed offset T1: the state it builds must be a prefix of the
owner's, or the new owner would apply those records twice when it resumes from T1.
Output is discarded; a record whose process() raises is skipped, as the owner either
skipped it too (skip/dlq) or never committed past it (fail).

A split child's replica also reads its partitions' ancestors (S2, see
orchestrator/wire/lineage.py): each through a key filter (only the records whose key
the producers now send to the child) and only up to the barrier; the child's own
partitions wait until every ancestor is read to its cap, so each key's records are
applied in the order its owner applied them.

A replay applies a partition's records only as the consumer's continuation of its
position: once a record at or past the cap (or behind a closed gate) was left
unapplied, the consumer has read past it, and a later record of that partition, even
of the same poll batch after the gate opened or of a batch after the cap moved on, is
not the next one. Applying it would skip the ones left (their effect lost from the
state, while T2 claims them). Such a partition applies nothing more until its consumer
is sent back to the position (`rewound`, processor/runtime/replay_consumers.py).
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from confluent_kafka import KafkaError, Message

from orchestrator.wire.barrier import Marker, Reroute, skip_marker
from orchestrator.wire.clock import Clock, SystemClock
from orchestrator.wire.config import CatchUpSource
from orchestrator.wire.partitions import format_partition
from processor.job import Job, Record
from processor.records import (
    collector_paused,
    new_record,
    offsets_of,
    plain_runs,
    run_records,
    window,
)
from processor.retention import OffsetOutOfRange
from processor.timed_job import TimedJob
from store import Store

__all__ = ["KeyFilter", "Replay", "Replica", "ReplicaRole", "log_error",
           "new_record"]

log = logging.getLogger("baton.processor.replica")

ReplicaRole = Literal["warmup", "standby", "activating"]
KeyFilter = Callable[[bytes | None], bool]

# runs a generator to its end, discarding what it yields, without a Python-level loop
_drain: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend
_chain = itertools.chain.from_iterable


def log_error(msg: Message) -> None:
    """A consumer error message in a replay batch: the runtime hands a partition's run
    over whole (processor/runtime/batches.py, `replay_by_task`), so a replica skips
    such a message itself; it carries no record.

    Raises:
        OffsetOutOfRange: the fetch position is no longer on the broker (the replay
            consumers never jump to another offset themselves: processor/retention.py).
    """
    err = msg.error()
    if err is None or err.code() == KafkaError._PARTITION_EOF:  # noqa: SLF001
        return
    if err.code() == KafkaError._AUTO_OFFSET_RESET:  # noqa: SLF001
        raise OffsetOutOfRange(format_partition(msg.topic(), msg.partition()), msg.offset(),
                               err.str())
    log.warning("consumer error on %s:%s: %s", msg.topic(), msg.partition(), err)


class Replay:
    """What every replay of a task's state shares: where it is (T2, `positions`), where
    it must stop (T1 or the changelog's end, `caps`), progress counters and the store.

    Subclasses read their own source: `Replica` the input through process(),
    `ChangelogReplica` (processor/changelog_replica.py) the task's changelog.
    """

    source: CatchUpSource = "input"

    def __init__(self, name: str, partitions: Sequence[str], store: Store, role: ReplicaRole,
                 positions: Mapping[str, int], caps: Mapping[str, int], *,
                 clock: Clock | None = None) -> None:
        self.name = name
        self.partitions = list(partitions)
        self.filters: dict[str, KeyFilter] = {}   # ancestor partition -> keep this key?
        self.gates: dict[str, list[str]] = {}     # own partition -> its ancestors
        self.store = store
        self.role: ReplicaRole = role
        self.positions = dict(positions)      # T2: next offset to apply, per partition
        self.caps = dict(caps)                # T1: never apply at or past these
        self.applied_total = 0
        self.dirty = False
        # partitions whose consumer read past records left unapplied (at the cap, or
        # held by a gate): none of their records count until it reads from `positions`
        self.read_past: set[str] = set()
        # expansion barriers (orchestrator/wire/barrier.py), as on the active path: the
        # job whose markers count, the own partitions whose misrouted records are
        # skipped (their forwarded copies count), who hears of a marker the model has
        # not named yet
        self.job_name = ""
        self.reroutes: dict[str, Reroute] = {}
        self.on_marker: Callable[[str, int, Marker], None] = lambda partition, offset, m: None
        self._clock = clock or SystemClock()
        self._rate_mark = (self._clock.monotonic(), 0)
        self.rate = 0.0

    def lag(self) -> int:
        return sum(max(0, self.caps.get(p, 0) - self.positions.get(p, 0)) for p in self.partitions)

    def cap(self, partition: str) -> int:
        """Where `partition` must stop now."""
        return self.caps.get(partition, 0)

    def caught_up(self) -> bool:
        return self.lag() == 0

    def start_offset(self, partition: str) -> int:
        """Where the replay consumer starts fetching `partition`."""
        return self.positions[partition]

    def rewound(self, partitions: Iterable[str]) -> None:
        """The consumer reads `partitions` from this replay's positions again (assigned
        or sought there): their records count again."""
        self.read_past.difference_update(partitions)

    def reported_positions(self) -> dict[str, int]:
        """The input positions the coordinator hears (T2 of the input partitions)."""
        return dict(self.positions)

    def apply(self, messages: Sequence[Message]) -> set[str]:
        """Apply a batch; return the partitions that reached their cap (to pause)."""
        raise NotImplementedError

    def ingested(self, positions: Mapping[str, int]) -> None:
        """The store took a bulk result reaching `positions` (the Spark path)."""
        self.positions.update(positions)

    def commit(self) -> None:
        """State and T2 in one WriteBatch."""
        if self.dirty:
            self.store.commit(self.positions)
            self.dirty = False

    def update_rate(self) -> float:
        now = self._clock.monotonic()
        then, count = self._rate_mark
        if now - then >= 1.0:
            self.rate = (self.applied_total - count) / (now - then)
            self._rate_mark = (now, self.applied_total)
        return self.rate


class Replica(Replay):
    """Replay of a task's input through process() (catch_up.source = "input")."""

    def __init__(self, name: str, partitions: Sequence[str], job: Job, store: Store,
                 role: ReplicaRole, positions: Mapping[str, int], caps: Mapping[str, int],
                 filters: Mapping[str, KeyFilter] | None = None,
                 gates: Mapping[str, Sequence[str]] | None = None, *,
                 clock: Clock | None = None) -> None:
        super().__init__(name, partitions, store, role, positions, caps, clock=clock)
        self.filters = dict(filters or {})
        self.gates = {p: list(g) for p, g in (gates or {}).items()}
        self.job = job
        if isinstance(job, TimedJob) and self.gates:    # the child's timers come from them
            job.lineage = {own: list(a) for own, a in self.gates.items()}

    def cap(self, partition: str) -> int:
        """Where `partition` must stop now: its cap, or its position while one of its
        ancestors still has records to apply."""
        gate = self.gates.get(partition)
        if gate and any(self.positions.get(a, 0) < self.caps.get(a, 0) for a in gate):
            return min(self.positions.get(partition, 0), self.caps.get(partition, 0))
        return self.caps.get(partition, 0)

    def apply(self, messages: Sequence[Message]) -> set[str]:
        """Apply a batch; return the partitions that reached their cap (to pause).

        A plain run of one partition (records with keys, no filter, no reroute) goes
        through the job's `process_batch` at once; anything else through `_apply_each`.
        """
        with collector_paused():
            return self._apply(messages)

    def _apply(self, messages: Sequence[Message]) -> set[str]:
        capped: set[str] = set()
        positions, filters, reroutes = self.positions, self.filters, self.reroutes
        read_past = self.read_past
        applied = 0
        try:
            for run, plain in plain_runs(messages):
                first = run[0]
                name = format_partition(first.topic(), first.partition()) if plain else ""
                if not plain or name in filters or name in reroutes:
                    applied += self._apply_each(run, capped)
                    continue
                if name in read_past:           # not the next records (module docstring)
                    capped.add(name)
                    continue
                offsets = offsets_of(run)
                cap = self.cap(name)
                lo, hi = window(offsets, positions.get(name, 0), cap)
                if hi < len(run):
                    capped.add(name)
                    read_past.add(name)
                if lo >= hi:
                    continue
                if lo or hi < len(run):
                    run, offsets = run[lo:hi], offsets[lo:hi]
                records = run_records(run, offsets)
                if records is None:                 # a record without key: a marker?
                    applied += self._apply_each(run, capped)
                    continue
                self._apply_records(records)
                positions[name] = offsets[-1] + 1
                applied += len(records)
        finally:
            if applied:
                self.applied_total += applied
                self.dirty = True
        return capped | {p for p in self.partitions
                         if self.positions.get(p, 0) >= self.cap(p)}

    def _apply_records(self, records: Sequence[Record]) -> None:
        """process_batch() over consecutive records of one partition, outputs discarded;
        if it raises, the batch is undone and applied record by record instead."""
        store = self.store
        store.begin_record()
        try:
            _drain(_chain(self.job.process_batch(records, store.state)))
            return
        except Exception:  # noqa: BLE001 - user code: redone one record at a time below
            store.rollback_record()
        process, state = self.job.process, store.state
        for record in records:
            store.begin_record()
            state.now = record.timestamp
            try:
                _drain(process(record, state))
            except Exception as exc:  # noqa: BLE001 - user code, see module docstring
                store.rollback_record()
                log.debug("replica %r: skipped %s:%d offset %d: %r", self.name, record.topic,
                          record.partition, record.offset, exc)

    def _apply_each(self, messages: Sequence[Message], capped: set[str]) -> int:
        """Apply records one at a time (markers, key filters, reroutes, error messages);
        return how many were applied, adding the partitions that reached a cap."""
        store, process, positions = self.store, self.job.process, self.positions
        read_past = self.read_past
        state = store.state
        begin, drain, filters = store.begin_record, _drain, self.filters
        pass_over = self.job.pass_over if isinstance(self.job, TimedJob) else None
        keep: KeyFilter | None = None
        reroute: Reroute | None = None
        # a poll batch comes in runs of one partition: look its name, position and cap
        # up once per run, not per record
        topic: str | None = None
        number = position = cap = -1
        name = ""
        applied = 0
        for msg in messages:
            if msg.error() is not None:
                log_error(msg)
                continue
            offset = msg.offset()
            t, p = msg.topic(), msg.partition()
            if p != number or t != topic:
                topic, number, name = t, p, format_partition(t, p)
                position, cap = positions.get(name, 0), self.cap(name)
                keep = filters.get(name)
                reroute = self.reroutes.get(name)
                if name in read_past:           # not the next records (module docstring)
                    cap = -1
            if offset < position:
                continue
            if offset >= cap:
                capped.add(name)
                read_past.add(name)
                continue
            key = msg.key()
            if key is None and skip_marker(self.job_name, msg, name, self.on_marker):
                position = positions[name] = offset + 1   # never process()ed
                reroute = self.reroutes.get(name)
                continue
            if keep is not None and not keep(key):
                if pass_over is not None:   # another task's key moves the timers' clock
                    begin()
                    try:
                        drain(pass_over(new_record(key, None, t, p, offset,
                                                   msg.timestamp()[1], ()), state))
                    except Exception as exc:  # noqa: BLE001 - user code, as below
                        store.rollback_record()
                        log.debug("replica %r: skipped %s offset %d: %r", self.name, name,
                                  offset, exc)
                position = positions[name] = offset + 1
                continue
            if (reroute is not None and offset > reroute.first
                    and reroute.target(key, offset) is not None):
                position = positions[name] = offset + 1   # another task's key
                continue
            record = new_record(key, msg.value(), t, p, offset, msg.timestamp()[1],
                                msg.headers() or ())
            begin()
            state.now = record.timestamp
            try:
                drain(process(record, state))
            except Exception as exc:  # noqa: BLE001 - user code, see module docstring
                store.rollback_record()
                log.debug("replica %r: skipped %s offset %d: %r", self.name, name, offset,
                          exc)
            position = positions[name] = offset + 1
            applied += 1
        return applied
