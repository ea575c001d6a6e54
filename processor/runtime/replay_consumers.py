"""The replays' consumers: warmups and standbys on one, activations on another.

An activation (a handoff's silent replay T2 -> T1) reads on a consumer of its own: on
the shared one it waited behind a warmup's fetched backlog, and pausing the warmups
instead dropped that backlog, fetched again after.

Caps: a warmup or standby never applies at or past the owner's committed offset (T1),
so its partitions pause at the cap and resume when a refresh of the caps (the catch-up
source's, processor/runtime/catch_up.py) moves it on. A resumed partition is sought back
to its replica's position, and only then do its records count again: the records the
replica left at the cap (or behind a split child's gate) were read already, and what
the consumer returns next would skip them (processor/replica.py).

Either consumer, cut off from the brokers while the processor's lookup consumer is not,
is replaced as the active one is (processor/runtime/cut_off.py): the new one is assigned
each partition where its replica would start reading it now, and a partition paused at
its cap stays paused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from confluent_kafka import Consumer, Message

from orchestrator.wire.clock import Clock, Deadline
from processor.replica import Replay
from processor.runtime import cut_off
from processor.runtime.batches import topic_partition
from processor.runtime.consumer_watch import ConsumerWatch, close_in_background
from processor.runtime.lookups import Lookups
from processor.runtime.metadata import PartitionCounts

__all__ = ["ReplayConsumers"]

log = logging.getLogger("baton.processor.runtime")

_CAP_REFRESH_S = 0.2          # how often replicas re-read the owner's committed offsets

# what a refresh of the caps hands back: the replicas whose caps may have moved on
CapRefresh = Callable[[Sequence[Replay]], Sequence[Replay]]


class ReplayConsumers:
    """The consumers every replay of one processor reads on.

    Args:
        replay: the warmups' and standbys' consumer.
        activation: the activations' consumer.
        clock: paces the refresh of the caps and the cut-off watches.
        lookups: the lookup consumer, which tells a consumer cut off from the brokers
            from brokers that are away (None: never replaced).
        remake: makes a consumer like the one named ("replay" or "activation"), to
            replace one cut off (None: never replaced).
    """

    def __init__(self, replay: Consumer, activation: Consumer, clock: Clock,
                 lookups: Lookups | None = None,
                 remake: Callable[[str], Consumer] | None = None) -> None:
        self.replay = replay
        self.activation = activation
        self._remake = remake
        self._watches = {} if lookups is None or remake is None else {
            name: ConsumerWatch(clock, lookups) for name in ("replay", "activation")}
        self.replaced = 0                       # how often one was cut off and replaced
        self.on_replaced: Callable[[], None] = lambda: None     # counts it (metrics)
        self._paused: set[str] = set()
        self._activating: set[str] = set()       # partitions on the activation consumer
        # which replica reads each assigned partition: two replays here may need one
        # partition (a split child's activation reads its parent's), and the second
        # assign is refused; its cleanup must leave the first one's partitions be
        self._holders: dict[str, Replay] = {}
        self._caps_due = Deadline.after(clock, 0.0)
        self._clock = clock
        self.waited_s = 0.0                 # time consume() waited for records (load.py)
        self._counts = PartitionCounts()

    @property
    def activating(self) -> bool:
        """An activation is reading (its consumer is worth a poll)."""
        return bool(self._activating)

    @property
    def paused(self) -> frozenset[str]:
        """The partitions paused at their replica's cap."""
        return frozenset(self._paused)

    def consume(self, batch: int, timeout: float) -> list[Message]:
        """While an activation replays (a handoff's pause), only its records are read:
        the warmups and standbys wait, their fetched records kept in the replay
        consumer's queue, and the activation has the CPU to itself."""
        name = "activation" if self._activating else "replay"
        started = self._clock.monotonic()
        messages: list[Message] = getattr(self, name).consume(batch, timeout)
        if len(messages) < batch:
            self.waited_s += self._clock.monotonic() - started
        if self._watches:
            self._watch_fetch(name, bool(messages))
        return messages

    def _held_on(self, name: str) -> dict[str, Replay]:
        """The partitions assigned to the consumer named, with the replica of each."""
        on_activation = name == "activation"
        return {p: r for p, r in self._holders.items()
                if (p in self._activating) == on_activation}

    def _watch_fetch(self, name: str, found: bool) -> None:
        """Replace the consumer named once it is cut off (consumer_watch.py)."""
        fetching = [] if found else [p for p in self._held_on(name) if p not in self._paused]
        topic = fetching[0].rpartition(":")[0] if fetching else None
        if self._watches[name].cut_off(getattr(self, name), found, topic):
            self._replace(name, f"has reached no broker for {cut_off.CUT_OFF_S:.0f} s while "
                                "the processor's other clients did")
            self.on_replaced()

    def warm(self, partitions: Sequence[str]) -> None:
        """Before an activation comes: the activation consumer asks for the metadata of
        its topics now (once per topic), not inside the handoff pause."""
        self._counts.before_assign(self.activation, [topic_partition(p) for p in partitions])

    def holder(self, partition: str) -> Replay | None:
        """The replica reading `partition` here (None: none)."""
        return self._holders.get(partition)

    def recover(self, partitions: Iterable[str]) -> None:
        """Reads found stalled (processor/runtime/stalls.py): a new consumer in place of
        each one reading any of `partitions`."""
        names = {"activation" if p in self._activating else "replay"
                 for p in partitions if p in self._holders}
        for name in sorted(names) if self._remake is not None else ():
            self._replace(name, "stopped reading a partition its replica may read on")

    def _replace(self, name: str, why: str) -> None:
        """A new consumer in place of the one named: each partition assigned where its
        replica would start reading it now, those paused at their caps paused again."""
        assert self._remake is not None
        old, new = getattr(self, name), self._remake(name)
        setattr(self, name, new)
        self._counts = PartitionCounts()
        held = self._held_on(name)
        assigned = [topic_partition(p, r.start_offset(p)) for p, r in held.items()]
        self._counts.before_assign(new, assigned)
        new.incremental_assign(assigned)
        paused = [topic_partition(p) for p in held if p in self._paused]
        if paused:
            new.pause(paused)
        for p, replica in held.items():
            replica.rewound([p])
        self.replaced += 1
        log.warning("the %s consumer %s: replaced, its %d partition(s) assigned again "
                    "where their replicas go on", name, why, len(assigned))
        close_in_background(old, f"{name} consumer")

    def assign(self, replica: Replay) -> None:
        """Start reading a replica's partitions: an activation's on the activation
        consumer, any other's on the replay consumer."""
        consumer = self.activation if replica.role == "activating" else self.replay
        assigned = [topic_partition(p, replica.start_offset(p)) for p in replica.partitions]
        self._counts.before_assign(consumer, assigned)
        consumer.incremental_assign(assigned)   # raises (_CONFLICT) before holding any
        if consumer is self.activation:
            self._activating.update(replica.partitions)
        self._holders.update(dict.fromkeys(replica.partitions, replica))
        replica.rewound(replica.partitions)

    def unassign(self, replica: Replay) -> None:
        """Stop reading `replica`'s partitions, those it holds: a replica whose assign
        was refused holds none (the partition another replica here reads stays with
        it), and librdkafka refuses to unassign what is not assigned."""
        partitions = [p for p in replica.partitions if self._holders.get(p) is replica]
        for p in partitions:
            del self._holders[p]
        for consumer, listed in self._by_consumer(partitions):
            assigned = {f"{tp.topic}:{tp.partition}" for tp in consumer.assignment()}
            mine = [p for p in listed if p in assigned]
            if not mine:
                continue
            # librdkafka keeps a partition's pause across incremental_unassign/assign:
            # resume first, or a later replay of the partition never fetches
            paused = [p for p in mine if p in self._paused]
            if paused:
                consumer.resume([topic_partition(p) for p in paused])
            consumer.incremental_unassign([topic_partition(p) for p in mine])
        self._paused.difference_update(partitions)
        self._activating.difference_update(partitions)

    def read_through(self, partitions: Sequence[str]) -> dict[str, int]:
        """How far the consumers have read each partition (past transaction markers
        and aborted records); partitions not read yet are left out."""
        read: dict[str, int] = {}
        for consumer, mine in self._by_consumer(partitions):
            read.update({f"{tp.topic}:{tp.partition}": tp.offset
                         for tp in consumer.position([topic_partition(p) for p in mine])
                         if tp.offset >= 0})
        return read

    def _by_consumer(self, partitions: Iterable[str]) -> list[tuple[Consumer, list[str]]]:
        """`partitions` split by the consumer that reads them."""
        on_activation: list[str] = []
        on_replay: list[str] = []
        for p in partitions:
            (on_activation if p in self._activating else on_replay).append(p)
        return [(c, ps) for c, ps in ((self.replay, on_replay),
                                      (self.activation, on_activation)) if ps]

    def refresh_caps(self, replicas: Iterable[Replay], refresh: CapRefresh) -> None:
        """Every `_CAP_REFRESH_S`: a split child's own partitions, paused while its
        ancestors were read, go on (activating replays too: their caps are fixed, their
        gates are not); the warmups and standbys get new caps from `refresh` and fetch
        again what their new caps allow."""
        if not self._caps_due.expired():
            return
        self._caps_due.arm(_CAP_REFRESH_S)
        replicas = list(replicas)
        for replica in replicas:
            self._resume(replica, replica.gates)
        for replica in refresh([r for r in replicas if r.role != "activating"]):
            self._resume(replica, replica.partitions)

    def _resume(self, replica: Replay, partitions: Iterable[str]) -> None:
        """Fetch again, from the replica's position, the paused partitions it may read.

        Resumed, then seeked: librdkafka fetches again within ~5 ms. Resumed alone it
        waits ~0.7 s, seeked first then resumed mostly ~1 s; a partition paused before
        its first fetch waits ~0.75 s either way."""
        resume = [p for p in partitions
                  if p in self._paused and replica.positions[p] < replica.cap(p)]
        if not resume:
            return
        self._paused.difference_update(resume)
        for consumer, mine in self._by_consumer(resume):
            consumer.resume([topic_partition(p) for p in mine])
            for p in mine:
                consumer.seek(topic_partition(p, replica.positions[p]))
        replica.rewound(resume)     # what it read past its position before comes again

    def pause_at_caps(self, capped: Iterable[str]) -> None:
        """Stop fetching partitions whose replica reached its cap (until it moves on)."""
        new = [p for p in capped if p not in self._paused]
        for consumer, mine in self._by_consumer(new):
            consumer.pause([topic_partition(p) for p in mine])
        self._paused.update(new)
