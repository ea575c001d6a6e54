"""The active tasks' consumer: which task owns each partition, from where it reads.

- assignment: each active partition is owned by one task and read from its T1;
- expansion barriers: a new partition waits until its parent is consumed up to the
  offset recorded at expansion, so a key's records are never processed out of order;
- the idle back-off (processor.idle_fetch_backoff_ms, processor/runtime/idle_fetch.py):
  an idle consumer's partitions are unassigned for a while, then assigned again;
- a consumer cut off from the brokers while the processor's lookup consumer is not is
  replaced by a new one (processor/runtime/cut_off.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from confluent_kafka import Consumer, Message

from orchestrator.wire.clock import Clock
from orchestrator.wire.protocol import Barrier
from processor.active import ActiveTask
from processor.runtime import cut_off
from processor.runtime.batches import ends_of, topic_partition
from processor.runtime.consumer_watch import ConsumerWatch, close_in_background
from processor.runtime.idle_fetch import IdleFetch, after_poll, before_poll
from processor.runtime.lookups import Lookups
from processor.runtime.metadata import PartitionCounts

__all__ = ["GROW_LOOKUP_S", "ActiveConsumer"]

log = logging.getLogger("baton.processor.runtime")

# how long a lookup of a growing task's new partitions may hold the loop: one stable
# lookup answers in milliseconds; past this, the next reply tries again
GROW_LOOKUP_S = 1.0


class ActiveConsumer:
    """The consumer of every active task of one processor.

    Args:
        consumer: the confluent-kafka consumer (with enable.partition.eof when the idle
            back-off is on: it must know when a fetch read a partition to its end).
        lookups: committed offsets, for barriers and new partitions.
        idle_backoff_s: processor.idle_fetch_backoff_ms in seconds (0: never back off).
        clock: times the idle back-off and the cut-off watch.
        remake: makes a consumer like `consumer`, to replace one cut off from the
            brokers (None: never replaced).
    """

    def __init__(self, consumer: Consumer, lookups: Lookups, idle_backoff_s: float,
                 clock: Clock, remake: Callable[[], Consumer] | None = None) -> None:
        self.consumer = consumer
        self._remake = remake
        self._watch = ConsumerWatch(clock, lookups)
        self.replaced = 0                        # how often it was cut off and replaced
        self.on_replaced: Callable[[], None] = lambda: None     # counts it (metrics)
        self._lookups = lookups
        self._idle_backoff_s = idle_backoff_s
        self._clock = clock
        self.barriers: dict[str, Barrier] = {}   # child partition -> its expansion barrier
        self.owner: dict[str, str] = {}          # active partition -> task
        self._held: dict[str, set[str]] = {}     # task -> partitions waiting on a barrier
        self._idle = IdleFetch()
        self._at_end: set[str] = set()          # active partitions read to their end
        self._resume_at: dict[str, int] = {}    # paused active partition -> next offset
        self._read_to: dict[str, int] = {}      # ... -> the consumer's position then
        self.idle_pauses = 0                     # how often the idle back-off paused
        self.waited_s = 0.0                      # time consume() waited for records
        # a partition past a consumer's cached partition count is otherwise fetched only
        # after librdkafka's own metadata refresh, up to ~1 s later (metadata.py)
        self._counts = PartitionCounts()

    def poll(self, batch: int, timeout: float, tasks: Mapping[str, ActiveTask]
             ) -> list[Message]:
        """A batch of the active tasks' records. With processor.idle_fetch_backoff_ms,
        the partitions stop being fetched once every one of them was read to its end and
        nothing came for that long, and are fetched again that long after
        (processor/runtime/idle_fetch.py)."""
        if self._idle_backoff_s > 0:
            self._idle, resume = before_poll(self._idle, self._clock.monotonic())
            if resume:
                self._resume()
        started = self._clock.monotonic()
        messages: list[Message] = self.consumer.consume(batch, timeout)
        if len(messages) < batch:       # it waited out its timeout (module load.py)
            self.waited_s += self._clock.monotonic() - started
        if self._remake is not None:
            self._watch_fetch(bool(messages), tasks)
        if self._idle_backoff_s <= 0:
            return messages
        found, ends = ends_of(messages)
        self._at_end.difference_update(found)
        self._at_end.update(ends)
        at_end = bool(self.owner) and self._at_end.issuperset(self.owner)
        self._idle, pause = after_poll(self._idle, self._clock.monotonic(), len(found),
                                       at_end, self._idle_backoff_s)
        if pause:
            self._pause(tasks)
        return messages

    def _watch_fetch(self, found: bool, tasks: Mapping[str, ActiveTask]) -> None:
        """Replace the consumer once it is cut off (consumer_watch.py)."""
        fetching = bool(self.owner) and not self._idle.paused
        topic = next(iter(self.owner)).rpartition(":")[0] if fetching else None
        if self._watch.cut_off(self.consumer, found, topic):
            self._replace(tasks, f"has reached no broker for {cut_off.CUT_OFF_S:.0f} s "
                                 "while the processor's other clients did")
            self.on_replaced()

    def recover(self, tasks: Mapping[str, ActiveTask]) -> None:
        """A read found stalled (processor/runtime/stalls.py): a new consumer, every
        partition of every active task that no barrier holds assigned where its task
        goes on (whatever the old consumer's state or this one's books said)."""
        if self._remake is None:
            return
        for name, active in tasks.items():
            held = self._held.get(name, set())
            for p in active.partitions:
                if p not in held and p in active.pending:
                    self.owner[p] = name
        self._replace(tasks, "stopped reading a partition whose end moved")

    def _replace(self, tasks: Mapping[str, ActiveTask], why: str) -> None:
        """A new consumer in place of the current one, each partition assigned where its
        task goes on; the old one is closed on a thread of its own (a client that lost
        its brokers may wait on them in its close)."""
        assert self._remake is not None
        old, self.consumer = self.consumer, self._remake()
        self._counts = PartitionCounts()
        self._at_end.clear()
        self._idle, self._resume_at, self._read_to = IdleFetch(), {}, {}
        self.replaced += 1
        parts = [topic_partition(p, tasks[t].pending[p])
                 for p, t in self.owner.items() if t in tasks]
        log.warning("the active consumer %s: replaced, its %d partition(s) assigned again "
                    "where their tasks go on", why, len(parts))
        self._counts.before_assign(self.consumer, parts)
        self.consumer.incremental_assign(parts)
        close_in_background(old, "active consumer")

    def warm(self, partitions: Sequence[str]) -> None:
        """Before a task comes here: the metadata of its topics, asked now (once per
        topic), so its first assign does not ask inside the handoff pause."""
        self._counts.before_assign(self.consumer, [topic_partition(p) for p in partitions])

    def reading(self) -> dict[str, str]:
        """Partition -> the task reading it: every partition assigned (or idly paused)."""
        return dict(self.owner)

    def _pause(self, tasks: Mapping[str, ActiveTask]) -> None:
        """Stop fetching every active partition, noting where each goes on. Unassigned,
        not paused: librdkafka fetched a resumed partition only at its next wake-up, ~1 s
        later (measured on an empty partition, and after any resume without a seek)."""
        self._resume_at = {p: tasks[t].pending[p] for p, t in self.owner.items() if t in tasks}
        if not self._resume_at:
            return
        parts = [topic_partition(p) for p in self._resume_at]
        self._read_to = {f"{tp.topic}:{tp.partition}": tp.offset
                         for tp in self.consumer.position(parts) if tp.offset >= 0}
        self.consumer.incremental_unassign(parts)
        self.idle_pauses += 1

    def _resume(self) -> None:
        """Fetch the paused partitions again, from where their tasks go on."""
        paused, self._resume_at, self._read_to = self._resume_at, {}, {}
        self._at_end.difference_update(paused)     # assigned anew: their end is told anew
        if paused:
            self.consumer.incremental_assign([topic_partition(p, o)
                                              for p, o in paused.items()])

    def read_positions(self, partitions: Sequence[str]) -> dict[str, int]:
        """How far the consumer has read each partition (past transaction markers);
        while the idle back-off has it unassigned, as far as it had read then."""
        positions = {p: self._read_to[p] for p in partitions if p in self._read_to}
        live = [p for p in partitions if p not in self._resume_at]
        if live:
            positions.update({f"{tp.topic}:{tp.partition}": tp.offset for tp in
                              self.consumer.position([topic_partition(p) for p in live])})
        return positions

    def _wake(self, changing: Iterable[str] = ()) -> None:
        """Before the assignment of `changing` changes: fetch again, and a new idle spell
        (a partition assigned again must be read to its end anew)."""
        if self._idle.paused:
            self._resume()
        self._idle = IdleFetch()
        self._at_end.difference_update(changing)

    def add(self, active: ActiveTask) -> None:
        """Start fetching a new active task's partitions (barriers permitting)."""
        self._held[active.name] = set()
        self._assign(active, active.partitions)

    def _assign(self, active: ActiveTask, partitions: Sequence[str]) -> None:
        ready = [p for p in partitions if not self._barrier_holds(active, p)]
        self._held[active.name].update(p for p in partitions if p not in ready)
        if not ready:
            return
        self._wake(ready)
        for p in ready:
            self.owner[p] = active.name
        assigned = [topic_partition(p, active.committed[p]) for p in ready]
        self._counts.before_assign(self.consumer, assigned)
        self.consumer.incremental_assign(assigned)

    def unassign(self, task: str) -> None:
        mine = [p for p, t in self.owner.items() if t == task]
        self._held.pop(task, None)
        if not mine:
            return
        self._wake(mine)     # what the idle back-off unassigned is assigned first
        for p in mine:
            del self.owner[p]
        self.consumer.incremental_unassign([topic_partition(p) for p in mine])

    def rewind(self, active: ActiveTask) -> None:
        """Seek the task's partitions back to its committed offsets (T1)."""
        self._wake(active.committed)
        for p, offset in active.committed.items():
            if p in self.owner:
                self.consumer.seek(topic_partition(p, offset))

    def grow(self, active: ActiveTask, partitions: Sequence[str]) -> None:
        """A task gained partitions (expansion): start them from their committed offsets.

        The lookup is one bounded attempt (`GROW_LOOKUP_S`): it runs on the loop, and a
        group coordinator that is lost, or an offset commit still pending on a new
        partition, must not hold the processor's other tasks. It raises KafkaException
        then, and the next reply tries again (`TaskDriver.reconcile`)."""
        new = [p for p in partitions if p not in active.partitions]
        if not new:
            return
        committed = self._lookups.committed_once(new, GROW_LOOKUP_S)
        active.partitions.extend(new)
        active.committed.update(committed)
        active.pending.update(committed)
        self._assign(active, new)

    def _barrier_holds(self, active: ActiveTask, partition: str) -> bool:
        """A new partition waits until its parent is consumed up to the expansion barrier.

        The barrier is reached when every *record* before it was processed and
        committed. Transaction markers and aborted records also take offsets, so the
        parent's committed offset can stay below the barrier for good when a marker is
        the parent's last entry; the consumer's position moves past them, though. So:
        committed >= barrier, or nothing of the parent is uncommitted and the consumer
        has read up to the barrier.
        """
        barrier = self.barriers.get(partition)
        if barrier is None:
            return False
        if not barrier.settled:
            return True         # its marker is not written yet: where it starts is open
        if barrier.parent not in active.committed:
            # another task's partition: its committed offset is looked up beside the loop
            # (processor/runtime/lookups.py), and the child waits until it answers
            found = self._lookups.committed_soon([barrier.parent])
            return found is None or found[barrier.parent] < barrier.offset
        committed = active.committed[barrier.parent]
        if committed >= barrier.offset:
            return False
        if active.pending.get(barrier.parent) != committed \
                or self.owner.get(barrier.parent) != active.name:
            return True
        position = self.read_positions([barrier.parent]).get(barrier.parent, -1)
        return bool(position < barrier.offset)

    def consumed_through(self, active: ActiveTask) -> dict[str, int]:
        """T1 as reported: the committed offsets, moved past trailing transaction markers
        (and aborted records) where nothing of the partition is uncommitted. Without
        this, a partition whose last entry is a commit marker would show a lag of one
        forever."""
        positions = dict(active.committed)
        settled = [p for p, o in positions.items()
                   if active.pending.get(p) == o and self.owner.get(p) == active.name]
        if not settled:
            return positions
        for name, offset in self.read_positions(settled).items():
            if offset > positions[name]:
                positions[name] = offset
        return positions

    def drop(self, active: ActiveTask, partitions: Iterable[str]) -> None:
        """Stop consuming some partitions of an active task (a split child leaves it)."""
        gone = set(partitions)
        mine = [p for p in gone if self.owner.get(p) == active.name]
        if mine:
            self._wake(mine)
        for p in mine:
            del self.owner[p]
        if mine:
            self.consumer.incremental_unassign([topic_partition(p) for p in mine])
        self._held.get(active.name, set()).difference_update(gone)
        active.partitions[:] = [p for p in active.partitions if p not in gone]
        for p in gone:
            active.committed.pop(p, None)
            active.pending.pop(p, None)

    def release_barriers(self, active: Mapping[str, ActiveTask]) -> None:
        """Start the held partitions whose parent has now passed its barrier."""
        for task, held in self._held.items():
            if held:
                task_now = active[task]
                self._assign(task_now, [p for p in list(held)
                                        if not self._barrier_holds(task_now, p)])
                held.difference_update(self.owner)
