"""A changelog replica: a task's state copied from its changelog, no process() involved.

With catch_up.source = "changelog", warmups, standbys and the catch-up an owner does
while activating all apply the task's changelog partition (processor/changelog.py
says what the owner writes there) instead of replaying its input:

* The replay consumer reads the partition with read_committed, so only transactions
  that committed (outputs, input offsets and these records together) are applied; a
  transaction aborted or fenced mid-way is never seen.
* Every committed record is already part of the owner's state, so unlike an input
  replay there is no cap to stop at: the replica applies all it reads. Its `caps`
  hold the partition's committed end (its last stable offset) only to measure the
  lag, in changelog records (offsets, so transaction markers count until read past).
* Each poll batch is one WriteBatch: the records as they are (state keys and values
  encoded as the store keeps them, deletes as tombstones, the input offsets the owner
  committed as applied offsets) and the changelog position T2.
* T2 moves past transaction markers and aborted records once the consumer has read
  past them (`settle`), so a replica at the end shows a lag of 0.
* A store that never followed this partition (no position on it) but holds state,
  from the input or an earlier changelog, is cleared before the first record is
  applied: keys deleted before the changelog began would otherwise survive.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Mapping, Sequence

from confluent_kafka import Message

from orchestrator.wire.clock import Clock
from orchestrator.wire.config import CatchUpSource
from processor.replica import Replay, ReplicaRole, log_error
from store import Store, changelog_offset, check_changelog_key
from store.codec import rare_keys

__all__ = ["ChangelogError", "ChangelogReplica"]

log = logging.getLogger("baton.processor.replica")

# unbound: ~15 ns a record, against ~75 ns through operator.methodcaller
_KEY = Message.key
_VALUE = Message.value


class ChangelogError(Exception):
    """The changelog cannot rebuild this task's store (a foreign record, a store ahead
    of the partition's end): the task stops; the message says why and what to do."""


class ChangelogReplica(Replay):
    """Applies one task's changelog partition to its store.

    Args:
        name: the task.
        partition: the task's changelog partition ("baton.<job>.changelog:N").
        inputs: the task's input partitions (their offsets ride in the changelog).
        store: the task's store.
        role: warmup, standby or activating.
        position: where the store is on the partition (T2).
        end: the partition's committed end when known (0: not read yet).
        fetch_from: where the consumer starts reading (at most `position`; a broker that
            cannot start a read_committed fetch mid-partition needs the beginning).
        clock: paces the rate.
    """

    source: CatchUpSource = "changelog"

    def __init__(self, name: str, partition: str, inputs: Sequence[str], store: Store,
                 role: ReplicaRole, position: int, end: int, fetch_from: int, *,
                 clock: Clock | None = None) -> None:
        super().__init__(name, [partition], store, role, {partition: position},
                         {partition: end}, clock=clock)
        self.partition = partition
        self._fetch_from = min(fetch_from, position)
        self._follow = fetch_from >= position      # reads from the store's position
        applied = store.applied_offsets()
        self._own = frozenset(inputs)
        self.inputs = {p: applied[p] for p in inputs if p in applied}
        self._keys: list[bytes] = []             # the records taken in, as columns
        self._values: list[bytes | None] = []
        # never followed this partition, yet holds state: cleared at the first record
        self._clear_first = partition not in applied and (
            bool(applied) or next(iter(store.snapshot()), None) is not None)

    def start_offset(self, partition: str) -> int:
        return self._fetch_from

    def reported_positions(self) -> dict[str, int]:
        """The input offsets the applied changelog carried (what the state reflects)."""
        return dict(self.inputs)

    def apply(self, messages: Sequence[Message]) -> set[str]:
        """Take a batch's records in (written at `commit`); nothing ever caps a changelog.

        The batch is taken whole, without a Python step per record (this loop is the
        apply rate): its keys and values are mapped out, and only keys that are not
        state keys (applied offsets, foreign keys, consumer errors, which carry no key)
        are looked at one by one.

        Raises:
            ChangelogError: a record Baton did not write (no key, a foreign key).
        """
        keys = list(map(_KEY, messages))
        rare = rare_keys(keys)
        errors = [i for i in rare if messages[i].error() is not None]
        if errors:
            for i in errors:
                log_error(messages[i])
            messages = [m for m in messages if m.error() is None]
            keys = list(map(_KEY, messages))
            rare = rare_keys(keys)
        if not messages:
            return set()
        position = self.positions[self.partition]
        if messages[0].offset() < position:     # the store has some (a read from 0):
            # skip them by bisection, not a Python step per record (an activation on
            # changelog_read_from = "beginning" passes the whole partition again)
            messages = messages[bisect_left(messages, position, key=Message.offset):]
            keys = list(map(_KEY, messages))
            rare = rare_keys(keys)
            if not messages:
                return set()
        if self._clear_first:
            self.inputs.clear()                 # the cleared store's offsets are gone too
        for i in rare:
            self._check_offset(messages[i].offset(), keys[i], messages[i].value())
        self._keys += keys
        self._values += map(_VALUE, messages)
        self.positions[self.partition] = messages[-1].offset() + 1
        self.applied_total += len(messages)
        self.dirty = True
        return set()

    def ingested(self, positions: Mapping[str, int]) -> None:
        """A bulk result (Spark, from this changelog) is in the store: its position on
        the partition and the input offsets the changelog carried come from there."""
        super().ingested(positions)
        applied = self.store.applied_offsets()
        self.inputs = {p: applied[p] for p in self._own if p in applied}
        if self._follow:
            self._fetch_from = self.positions[self.partition]

    def _check_offset(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """An applied-offset record (its input offset is noted), or a foreign record.

        Raises:
            ChangelogError: a record Baton did not write.
        """
        try:
            carried = changelog_offset(check_changelog_key(key), value)
        except ValueError as exc:
            raise ChangelogError(f"task {self.name!r}: {self.partition} offset {offset}: "
                                 f"{exc}") from exc
        if carried is not None and carried[0] in self._own:
            self.inputs[carried[0]] = carried[1]

    def settle(self, consumed: int) -> None:
        """The consumer has read up to `consumed` (past markers and aborted records):
        nothing below it is left to apply."""
        if consumed > self.positions[self.partition]:
            self.positions[self.partition] = consumed
            self.dirty = True

    def commit(self) -> None:
        """The records taken in and T2, in one WriteBatch."""
        if not self.dirty:
            return
        if self._clear_first:      # taking a position on the partition: its state only
            log.info("task %r: the store never followed %s: cleared before applying it",
                     self.name, self.partition)
            self.store.clear()
            self._clear_first = False
        self.store.apply_records(self._keys, self._values, self.positions)
        self._keys, self._values = [], []
        self.dirty = False
