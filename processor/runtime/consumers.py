"""The task runtime's consumers: who reads which partition, from where, and when.

All are `assign()`-based (the coordinator owns assignment, not Kafka's group
protocol) and `read_committed`: one for active tasks, one for replays (warmups,
standbys), one for activations (a handoff's silent replay: it must not queue behind
a warmup's backlog) and one that reads nothing and only looks offsets up (committed
offsets, watermarks): a broker answers one connection's requests in order, so a lookup
on a reading consumer waits behind its fetch, which may carry a whole backlog. This
module owns everything about them:

- assignment: the active consumer's partitions, each owned by one task, and the
  replay and activation consumers';
- caps: a warmup or standby never applies at or past the owner's committed offset
  (T1), so its partitions pause at the cap and resume when a refresh of the owner's
  committed offsets moves the cap on; a changelog replica is never capped (all it
  reads has committed), its cap is the partition's committed end, for its lag;
- expansion barriers: a new partition waits until its parent is consumed up to the
  offset recorded at expansion, so a key's records are never processed out of order;
- the idle back-off (processor.idle_fetch_backoff_ms, processor/runtime/idle_fetch.py):
  an idle active consumer's partitions are unassigned for a while, then assigned again.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from orchestrator.kafka.logs import client_logging
from orchestrator.kafka.offsets import (
    committed_offsets,
    committed_once,
    end_offsets_once,
    watermarks,
)
from orchestrator.wire.clock import Clock, Deadline
from orchestrator.wire.config import Config
from orchestrator.wire.partitions import split_partition
from orchestrator.wire.protocol import Barrier
from processor.active import ActiveTask
from processor.replica import Replay
from processor.runtime.idle_fetch import IdleFetch, after_poll, before_poll
from processor.runtime.metadata import PartitionCounts

__all__ = ["Consumers", "by_task", "ends_of", "replay_by_task", "topic_partition"]

log = logging.getLogger("baton.processor.runtime")

_CAP_REFRESH_S = 0.2          # how often replicas re-read the owner's committed offsets
_CAP_LOOKUP_TIMEOUT_S = 2.0   # a refresh that cannot answer this fast is skipped
# A partition assigned while a fetch is parked at the broker waits for that fetch to
# return; librdkafka's default (500 ms) would then sit inside every handoff pause.
_FETCH_WAIT_MS = 20
# A partition whose fetched records fill librdkafka's queue is fetched again only after
# this long (default 1 s): a replay drains its queue in a few ms and then sat idle.
_FETCH_QUEUE_BACKOFF_MS = 5


def topic_partition(name: str, offset: int | None = None) -> TopicPartition:
    """The confluent-kafka `TopicPartition` of partition `name` ("topic:N")."""
    topic, number = split_partition(name)
    if offset is None:
        return TopicPartition(topic, number)
    return TopicPartition(topic, number, offset)


_tp = topic_partition


# Message's own methods, unbound: a per-record call through them costs ~15 ns, through
# operator.methodcaller (a lookup by name each time) ~75 ns.
_PARTITION = Message.partition
_TOPIC = Message.topic
_ERROR = Message.error


def by_task(messages: Sequence[Message], task_of: Callable[[str], str | None],
            on_error: Callable[[Message], None]) -> dict[str, list[Message]]:
    """Group a batch by task. The broker returns runs of one partition: a run is taken
    whole when it is one topic's and holds no error, without a Python step per record
    (grouping was a third of a changelog apply's time)."""
    grouped: dict[str, list[Message]] = {}
    for _, same_number in itertools.groupby(messages, _PARTITION):
        run = list(same_number)
        if _is_end(run[-1]):        # a fetch read its partition to the end (idle_fetch.py)
            run.pop()
            if not run:
                continue
        if any(map(_ERROR, run)) or len(set(map(_TOPIC, run))) > 1:
            _group_one_by_one(run, task_of, on_error, grouped)
            continue
        task = task_of(f"{run[0].topic()}:{run[0].partition()}")
        if task is not None:
            _add_run(grouped, task, run)
    return grouped


def _is_end(msg: Message) -> bool:
    """The event of a partition read to its end (enable.partition.eof)."""
    err = msg.error()
    return err is not None and err.code() == KafkaError._PARTITION_EOF  # noqa: SLF001


def ends_of(messages: Sequence[Message]) -> tuple[set[str], set[str]]:
    """The partitions a batch holds records of, and those it says were read to their end
    (a partition's end event follows its records), without a Python step per record."""
    events = list(filter(_ERROR, messages))
    ends = {f"{m.topic()}:{m.partition()}" for m in events if _is_end(m)}
    records = list(itertools.filterfalse(_ERROR, messages)) if events else messages
    seen = set(zip(map(_TOPIC, records), map(_PARTITION, records), strict=True))
    return {f"{t}:{n}" for t, n in seen}, ends


def replay_by_task(messages: Sequence[Message], owner: Mapping[str, str],
                   on_error: Callable[[Message], None]) -> dict[str, list[Message]]:
    """Group a replay batch by task, as `by_task`, at a fraction of its cost when no two
    of the replicas' partitions share a partition number (the common case: one topic):
    the number then names the partition, since the consumer only returns records of
    partitions assigned to it, so a run is taken whole by its number alone, without
    asking each record its topic or its error. A run of a known number may then hold a
    partition's error message: the replicas skip (and log) those themselves.
    (Grouping was the largest cost of a changelog apply after the consume itself.)"""
    by_number = {int(name.rpartition(":")[2]): task for name, task in owner.items()}
    if len(by_number) != len(owner):
        return by_task(messages, owner.get, on_error)
    grouped: dict[str, list[Message]] = {}
    for number, same_number in itertools.groupby(messages, _PARTITION):
        run = list(same_number)
        task = by_number.get(number)
        if task is None:                 # a consumer-level error (partition -1)
            _group_one_by_one(run, owner.get, on_error, grouped)
        else:
            _add_run(grouped, task, run)
    return grouped


def _add_run(grouped: dict[str, list[Message]], task: str, run: list[Message]) -> None:
    bucket = grouped.get(task)
    if bucket is None:
        grouped[task] = run
    else:
        bucket.extend(run)


def _group_one_by_one(messages: Sequence[Message], task_of: Callable[[str], str | None],
                      on_error: Callable[[Message], None],
                      grouped: dict[str, list[Message]]) -> None:
    for msg in messages:
        if msg.error():
            on_error(msg)
            continue
        task = task_of(f"{msg.topic()}:{msg.partition()}")
        if task is not None:
            grouped.setdefault(task, []).append(msg)


class Consumers:
    """The consumers of one processor (active, replay, activation, lookup), owned by the
    runtime's loop.

    Args:
        config: the job's configuration (Kafka settings).
        group: the job's consumer group (`baton.<job>`), for offsets and fencing.
        clock: paces the refresh of the replicas' caps.
    """

    def __init__(self, config: Config, group: str, clock: Clock) -> None:
        settings = config.kafka_settings(**{
            "group.id": group, "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            "enable.partition.eof": False, "fetch.wait.max.ms": _FETCH_WAIT_MS,
            "fetch.queue.backoff.ms": _FETCH_QUEUE_BACKOFF_MS})
        # an idle back-off needs to know when a fetch has read a partition to its end
        self._idle_backoff_s = config.processor.idle_fetch_backoff_ms / 1000
        self.active = Consumer({**settings, **client_logging("processor.active"),
                                "enable.partition.eof": self._idle_backoff_s > 0})
        # a replay never jumps over records the broker no longer holds: a fetch below
        # the first retained offset is an error (processor/retention.py)
        replays = {**settings, "auto.offset.reset": "error"}
        self.replay = Consumer({**replays, **client_logging("processor.replay")})
        # activations (a handoff's silent replay T2 -> T1) read on a consumer of their
        # own: on the shared one they waited behind a warmup's fetched backlog, and
        # pausing the warmups instead dropped that backlog, fetched again after
        self.activation = Consumer({**replays, **client_logging("processor.activation")})
        # never assigned: its lookups do not wait behind a fetched backlog (a warmup's
        # start and its cap refreshes, in the main loop, waited ~250 ms behind one)
        self.lookup = Consumer({**settings, **client_logging("processor.lookup")})
        self.barriers: dict[str, Barrier] = {}   # child partition -> its expansion barrier
        self.owner: dict[str, str] = {}          # active partition -> task
        self._held: dict[str, set[str]] = {}     # task -> partitions waiting on a barrier
        self._paused: set[str] = set()
        self._activating: set[str] = set()       # partitions on the activation consumer
        self._caps_due = Deadline.after(clock, 0.0)
        self._clock = clock
        self._idle = IdleFetch()
        self._at_end: set[str] = set()          # active partitions read to their end
        self._resume_at: dict[str, int] = {}    # paused active partition -> next offset
        self._read_to: dict[str, int] = {}      # ... -> the consumer's position then
        self.idle_pauses = 0                     # how often the idle back-off paused
        # a partition past a consumer's cached partition count is otherwise fetched only
        # after librdkafka's own metadata refresh, up to ~1 s later (metadata.py)
        self._counts = PartitionCounts()

    # ---- offsets ---------------------------------------------------------------------

    def committed(self, partitions: Iterable[str]) -> dict[str, int]:
        """The group's committed offsets (T1) of `partitions`."""
        return committed_offsets(self.lookup, partitions)

    def low_watermark(self, partition: str) -> int:
        """The first offset the broker still holds on `partition`."""
        return watermarks(self.lookup, partition)[0]

    def bounds(self, partition: str) -> tuple[int, int]:
        """`partition`'s first offset and its committed end (the last stable offset:
        the replay consumer reads committed records only)."""
        return watermarks(self.lookup, partition)

    def read_through(self, partitions: Sequence[str]) -> dict[str, int]:
        """How far the replay consumer has read each partition (past transaction
        markers and aborted records); partitions it has not read yet are left out."""
        read: dict[str, int] = {}
        for consumer, mine in self._by_consumer(partitions):
            read.update({f"{tp.topic}:{tp.partition}": tp.offset
                         for tp in consumer.position([_tp(p) for p in mine])
                         if tp.offset >= 0})
        return read

    def _by_consumer(self, partitions: Iterable[str]) -> list[tuple[Consumer, list[str]]]:
        """`partitions` split by the replay-side consumer that reads them."""
        on_activation: list[str] = []
        on_replay: list[str] = []
        for p in partitions:
            (on_activation if p in self._activating else on_replay).append(p)
        return [(c, ps) for c, ps in ((self.replay, on_replay),
                                      (self.activation, on_activation)) if ps]

    # ---- replays ---------------------------------------------------------------------

    @property
    def activating(self) -> bool:
        """An activation is reading (its consumer is worth a poll)."""
        return bool(self._activating)

    def assign_replay(self, replica: Replay) -> None:
        """Start reading a replica's partitions: an activation's on the activation
        consumer, any other's on the replay consumer."""
        consumer = self.replay
        if replica.role == "activating":
            consumer = self.activation
            self._activating.update(replica.partitions)
        assigned = [_tp(p, replica.start_offset(p)) for p in replica.partitions]
        self._counts.before_assign(consumer, assigned)
        consumer.incremental_assign(assigned)

    def unassign_replay(self, partitions: Sequence[str]) -> None:
        for consumer, mine in self._by_consumer(partitions):
            # librdkafka keeps a partition's pause across incremental_unassign/assign:
            # resume first, or a later replay of the partition never fetches
            paused = [p for p in mine if p in self._paused]
            if paused:
                consumer.resume([_tp(p) for p in paused])
            consumer.incremental_unassign([_tp(p) for p in mine])
        self._paused.difference_update(partitions)
        self._activating.difference_update(partitions)

    def refresh_caps(self, replicas: Iterable[Replay],
                     ancestor_ends: Callable[[str], Mapping[str, int]]) -> None:
        """Warmups and standbys follow the owner's committed offsets as they advance
        (a split child's ancestors no further than their barriers); changelog
        replicas, the changelog's committed end."""
        if not self._caps_due.expired():
            return
        self._caps_due.arm(_CAP_REFRESH_S)
        replicas = list(replicas)
        self._resume_gated(replicas)
        following = [r for r in replicas if r.role != "activating"]
        self._refresh_ends([r for r in following if r.source == "changelog"])
        following = [r for r in following if r.source == "input"]
        partitions = [p for r in following for p in r.partitions]
        if not partitions:
            return
        try:
            caps = committed_once(self.lookup, partitions, _CAP_LOOKUP_TIMEOUT_S)
        except KafkaException as exc:       # keep the old caps; the next refresh retries
            log.debug("replica caps not refreshed: %s", exc)
            return
        for replica in following:
            ends = ancestor_ends(replica.name)
            replica.caps = {p: min(caps[p], ends.get(p, caps[p])) for p in replica.partitions}
            self._resume(replica, replica.partitions)

    def _refresh_ends(self, replicas: Sequence[Replay]) -> None:
        """A changelog replica's cap: its partition's committed end, for its lag."""
        if not replicas:
            return
        try:
            ends = end_offsets_once(self.lookup, [p for r in replicas for p in r.partitions],
                                    _CAP_LOOKUP_TIMEOUT_S)
        except KafkaException as exc:       # keep the old ends; the next refresh retries
            log.debug("changelog ends not refreshed: %s", exc)
            return
        for replica in replicas:
            replica.caps = {p: ends[p] for p in replica.partitions}

    def _resume_gated(self, replicas: Iterable[Replay]) -> None:
        """A split child's own partition, paused while its ancestors were read, goes on
        (activating replays too: their caps are fixed, their gates are not)."""
        for replica in replicas:
            self._resume(replica, replica.gates)

    def _resume(self, replica: Replay, partitions: Iterable[str]) -> None:
        """Fetch again, from the replica's position, the paused partitions it may read.

        Resumed, then seeked: librdkafka fetches again within ~5 ms. Resumed alone it
        waits ~0.7 s, seeked first then resumed mostly ~1 s; a partition paused before
        its first fetch waits ~0.75 s either way (measured on noida-db)."""
        resume = [p for p in partitions
                  if p in self._paused and replica.positions[p] < replica.cap(p)]
        if not resume:
            return
        self._paused.difference_update(resume)
        for consumer, mine in self._by_consumer(resume):
            consumer.resume([_tp(p) for p in mine])
            for p in mine:
                consumer.seek(_tp(p, replica.positions[p]))

    def pause_at_caps(self, capped: Iterable[str]) -> None:
        """Stop fetching partitions whose replica reached its cap (until it moves on)."""
        new = [p for p in capped if p not in self._paused]
        for consumer, mine in self._by_consumer(new):
            consumer.pause([_tp(p) for p in mine])
        self._paused.update(new)

    # ---- active tasks ----------------------------------------------------------------

    def poll_active(self, batch: int, timeout: float, tasks: Mapping[str, ActiveTask]
                    ) -> list[Message]:
        """A batch of the active tasks' records. With processor.idle_fetch_backoff_ms,
        the partitions stop being fetched once every one of them was read to its end and
        nothing came for that long, and are fetched again that long after
        (processor/runtime/idle_fetch.py)."""
        if self._idle_backoff_s > 0:
            self._idle, resume = before_poll(self._idle, self._clock.monotonic())
            if resume:
                self._resume_active()
        messages: list[Message] = self.active.consume(batch, timeout)
        if self._idle_backoff_s <= 0:
            return messages
        found, ends = ends_of(messages)
        self._at_end.difference_update(found)
        self._at_end.update(ends)
        at_end = bool(self.owner) and self._at_end.issuperset(self.owner)
        self._idle, pause = after_poll(self._idle, self._clock.monotonic(), len(found),
                                       at_end, self._idle_backoff_s)
        if pause:
            self._pause_active(tasks)
        return messages

    def _pause_active(self, tasks: Mapping[str, ActiveTask]) -> None:
        """Stop fetching every active partition, noting where each goes on. Unassigned,
        not paused: librdkafka fetched a resumed partition only at its next wake-up, ~1 s
        later (measured on an empty partition, and after any resume without a seek)."""
        self._resume_at = {p: tasks[t].pending[p] for p, t in self.owner.items() if t in tasks}
        if not self._resume_at:
            return
        parts = [_tp(p) for p in self._resume_at]
        self._read_to = {f"{tp.topic}:{tp.partition}": tp.offset
                         for tp in self.active.position(parts) if tp.offset >= 0}
        self.active.incremental_unassign(parts)
        self.idle_pauses += 1

    def _resume_active(self) -> None:
        """Fetch the paused partitions again, from where their tasks go on."""
        paused, self._resume_at, self._read_to = self._resume_at, {}, {}
        self._at_end.difference_update(paused)     # assigned anew: their end is told anew
        if paused:
            self.active.incremental_assign([_tp(p, o) for p, o in paused.items()])

    def _position(self, partitions: Sequence[str]) -> dict[str, int]:
        """How far the active consumer has read each partition (past transaction markers);
        while the idle back-off has it unassigned, as far as it had read then."""
        positions = {p: self._read_to[p] for p in partitions if p in self._read_to}
        live = [p for p in partitions if p not in self._resume_at]
        if live:
            positions.update({f"{tp.topic}:{tp.partition}": tp.offset
                              for tp in self.active.position([_tp(p) for p in live])})
        return positions

    def _wake_active(self, changing: Iterable[str] = ()) -> None:
        """Before the active assignment of `changing` changes: fetch again, and a new
        idle spell (a partition assigned again must be read to its end anew)."""
        if self._idle.paused:
            self._resume_active()
        self._idle = IdleFetch()
        self._at_end.difference_update(changing)

    def add_active(self, active: ActiveTask) -> None:
        """Start fetching a new active task's partitions (barriers permitting)."""
        self._held[active.name] = set()
        self._assign_active(active, active.partitions)

    def _assign_active(self, active: ActiveTask, partitions: Sequence[str]) -> None:
        ready = [p for p in partitions if not self._barrier_holds(active, p)]
        self._held[active.name].update(p for p in partitions if p not in ready)
        if not ready:
            return
        self._wake_active(ready)
        for p in ready:
            self.owner[p] = active.name
        assigned = [_tp(p, active.committed[p]) for p in ready]
        self._counts.before_assign(self.active, assigned)
        self.active.incremental_assign(assigned)

    def unassign_active(self, task: str) -> None:
        mine = [p for p, t in self.owner.items() if t == task]
        self._held.pop(task, None)
        if not mine:
            return
        self._wake_active(mine)     # what the idle back-off unassigned is assigned first
        for p in mine:
            del self.owner[p]
        self.active.incremental_unassign([_tp(p) for p in mine])

    def rewind(self, active: ActiveTask) -> None:
        """Seek the task's partitions back to its committed offsets (T1)."""
        self._wake_active(active.committed)
        for p, offset in active.committed.items():
            if p in self.owner:
                self.active.seek(_tp(p, offset))

    def grow(self, active: ActiveTask, partitions: Sequence[str]) -> None:
        """A task gained partitions (expansion): start them from their committed offsets."""
        new = [p for p in partitions if p not in active.partitions]
        if not new:
            return
        committed = self.committed(new)
        active.partitions.extend(new)
        active.committed.update(committed)
        active.pending.update(committed)
        self._assign_active(active, new)

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
            parent = self.committed([barrier.parent])[barrier.parent]
            return bool(parent < barrier.offset)
        committed = active.committed[barrier.parent]
        if committed >= barrier.offset:
            return False
        if active.pending.get(barrier.parent) != committed \
                or self.owner.get(barrier.parent) != active.name:
            return True
        position = self._position([barrier.parent]).get(barrier.parent, -1)
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
        for name, offset in self._position(settled).items():
            if offset > positions[name]:
                positions[name] = offset
        return positions

    def drop_active(self, active: ActiveTask, partitions: Iterable[str]) -> None:
        """Stop consuming some partitions of an active task (a split child leaves it)."""
        gone = set(partitions)
        mine = [p for p in gone if self.owner.get(p) == active.name]
        if mine:
            self._wake_active(mine)
        for p in mine:
            del self.owner[p]
        if mine:
            self.active.incremental_unassign([_tp(p) for p in mine])
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
                self._assign_active(task_now, [p for p in list(held)
                                               if not self._barrier_holds(task_now, p)])
                held.difference_update(self.owner)

    # ---- both ------------------------------------------------------------------------

    def log_error(self, msg: Message) -> None:
        err = msg.error()
        if err.code() != KafkaError._PARTITION_EOF:  # noqa: SLF001
            log.warning("consumer error on %s:%s: %s", msg.topic(), msg.partition(), err)

    def close(self) -> None:
        self.active.close()
        self.replay.close()
        self.activation.close()
        self.lookup.close()
