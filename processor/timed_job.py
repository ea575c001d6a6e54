"""A job with timers as every path runs it: the records' partition clocks moved and the
timers due fired before each record reaches the job (the rules: processor/timers.py).

The runtime, replicas, Spark's job maker and `processor.testing` wrap a job whose class
overrides `on_timer` in a `TimedJob` (`with_timers`), around its formats, so that timers
keep the records' raw keys (a split places them by those). A job without timers is not
wrapped: it pays nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from orchestrator.wire.partitioners import home_partition
from processor.job import Context, Emitted, Job, Record, State
from processor.timers import (
    CLOCK,
    WALL,
    Timer,
    TimerError,
    Timers,
    parse_entry,
    stream_prefix,
    timer_entry,
)

__all__ = ["TimedJob", "uses_timers", "with_timers"]


def uses_timers(job: Job | type[Job]) -> bool:
    """Whether the job's class overrides `on_timer` (only such jobs are wrapped)."""
    cls = job if isinstance(job, type) else type(job)
    inner = getattr(job, "inner", None)
    if inner is not None and not isinstance(job, type):
        return uses_timers(inner)
    return getattr(cls, "on_timer", Job.on_timer) is not Job.on_timer


class TimedJob(Job):
    """A job with timers, as every path runs it: `process()` moves the record's
    partition's clock and fires what is due before the job's own `process()` (module
    docstring). Records go through `process()` one at a time (the job's
    `process_batch` is not used: a timer set by one record may be due before the next).

    Args:
        job: the job (its formats applied: keys and outputs are raw here).
        timers: the registry its context hands out.
        partitioner: the producers' partitioner (`[job] partitioner`), by which a barrier
            marker says where each key now lives.
    """

    def __init__(self, job: Job, timers: Timers, partitioner: str = "consistent_random"
                 ) -> None:
        self.inner = job
        self.params = job.params
        self.timers = timers
        self.partitioner = partitioner
        # a split child's own partitions -> the ancestors their keys' timers come from
        self.lineage: dict[str, list[str]] = {}

    def setup(self, context: Context) -> None:
        self.inner.setup(context)

    def close(self) -> None:
        self.inner.close()

    def process(self, record: Record, state: State) -> list[Emitted]:
        outputs: list[Emitted] = []
        timers = self.timers
        partition, held, clock, due = self._advance(record, state, outputs)
        timers._enter(state, partition, clock, due)
        timers._key = record.key
        try:
            outputs.extend(self.inner.process(record, state) or ())
        finally:
            timers._leave()
        self._store_clock(state, partition, held, clock, timers._due)
        return outputs

    def process_batch(self, records: Sequence[Record], state: State
                      ) -> Iterable[Iterable[Emitted]]:
        following = getattr(state, "following", None)
        return [self.process(r, state)
                for r in (records if following is None else following(records))]

    def pass_over(self, record: Record, state: State) -> list[Emitted]:
        """A record of the partition that is another task's (a split child's replay
        filters it out): it moves the clock, and what it makes due fires."""
        outputs: list[Emitted] = []
        partition, held, clock, due = self._advance(record, state, outputs)
        self._store_clock(state, partition, held, clock, due)
        return outputs

    def on_timer(self, timer: Timer, state: State) -> Iterable[Emitted]:
        return self.inner.on_timer(timer, state)

    def _advance(self, record: Record, state: State, outputs: list[Emitted]
                 ) -> tuple[str, Any, int | None, int | None]:
        """The record's partition, its clock entry as read, and its clock and earliest
        due time once the record moved it and what was due fired."""
        partition = f"{record.topic}:{record.partition}"
        held = state.get(CLOCK + partition.encode())
        if held is None and partition in self.lineage:
            held = self.inherit(partition, state)
        clock, due = (None, None) if held is None else held
        stamp = record.timestamp
        if stamp >= 0 and (clock is None or stamp > clock):
            clock = stamp
        if due is not None and clock is not None and due <= clock:
            due = self._fire(state, partition, clock, outputs)
        return partition, held, clock, due

    @staticmethod
    def _store_clock(state: State, partition: str, held: Any, clock: int | None,
                     due: int | None) -> None:
        """Write the partition's clock entry if it changed from `held` (a timer fired
        meanwhile rewrote nothing of it: its firing deleted an entry of its own)."""
        if (clock is None and due is None) or (
                held is not None and held[0] == clock and held[1] == due):
            return
        state[CLOCK + partition.encode()] = [clock, due]

    def _fire(self, state: State, partition: str, clock: int, outputs: list[Emitted]
              ) -> int | None:
        """Fire the partition's timers due at `clock`, earliest first (those set while
        firing too); return the time of the first one left."""
        prefix = stream_prefix(partition)
        while True:
            first = next(state.scan(prefix), None)
            if first is None:
                return None
            time, key, name = parse_entry(first[0], prefix)
            if time > clock:
                return time
            del state[first[0]]
            outputs.extend(self._call(Timer(key, time, name), state, partition, clock,
                                      f"the timer at {time} (key {key!r}, name {name!r}) "
                                      f"of {partition}"))

    def fire_wall(self, now_ms: int, state: State) -> tuple[Timer, list[Emitted]] | None:
        """Fire the earliest wall-clock timer due at `now_ms` (deleted, `on_timer`
        called): it and its outputs; None when none is due. The caller fires one at a
        time, each a record's worth of the transaction."""
        first = next(state.scan(WALL), None)
        if first is None:
            return None
        time, key, name = parse_entry(first[0], WALL)
        if time > now_ms:
            return None
        del state[first[0]]
        timer = Timer(key, time, name, wall=True)
        return timer, self._call(timer, state, "", None, f"the wall-clock timer at {time} "
                                                         f"(key {key!r}, name {name!r})")

    def _call(self, timer: Timer, state: State, partition: str, clock: int | None,
              what: str) -> list[Emitted]:
        """`on_timer(timer)` with the registry bound to the timer's key, its outputs; what
        it raises named as `what`'s (TimerError: the task stops)."""
        timers = self.timers
        timers._enter(state, partition, clock, None)
        timers._key = timer.key
        try:
            return list(self.inner.on_timer(timer, state) or ())
        except TimerError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code: named, then the task stops
            raise TimerError(f"on_timer() raised for {what}: {exc!r}") from exc
        finally:
            timers._leave()

    def next_wall(self, state: State) -> int | None:
        """When the earliest wall-clock timer is due (None: there is none)."""
        first = next(state.scan(WALL), None)
        return None if first is None else parse_entry(first[0], WALL)[0]

    def rehome(self, partition: str, children: Sequence[str], count: int, state: State
               ) -> None:
        """The barrier marker of `partition` for `children` was read (the input now has
        `count` partitions): the children's clocks start at this one's, and the timers
        whose key now lives on one of them move there."""
        topic, _, number = partition.rpartition(":")
        held = state.get(CLOCK + partition.encode())
        if held is None:
            return                      # no record, so no timer, here yet
        for child in children:
            self._start_clock(state, child, held, None)
        prefix = stream_prefix(partition)
        for raw, _ in list(state.scan(prefix)):
            time, key, name = parse_entry(raw, prefix)
            home = home_partition(self.partitioner, key, count)
            target = f"{topic}:{home}"
            if home is None or str(home) == number or target not in children:
                continue
            del state[raw]
            state[timer_entry(stream_prefix(target), time, key, name)] = 0
            self._start_clock(state, target, None, time)

    def inherit(self, partition: str, state: State) -> list[Any] | None:
        """Before the first record of a split child's own `partition`: the timers its
        ancestors' replay set move here, and the clock starts at theirs."""
        held: list[Any] | None = None
        for ancestor in self.lineage.get(partition, ()):
            prefix = stream_prefix(ancestor)
            before = state.get(CLOCK + ancestor.encode())
            for raw, _ in list(state.scan(prefix)):
                time, key, name = parse_entry(raw, prefix)
                del state[raw]
                state[timer_entry(stream_prefix(partition), time, key, name)] = 0
                self._start_clock(state, partition, before, time)
            if before is not None:
                self._start_clock(state, partition, before, None)
        held = state.get(CLOCK + partition.encode())
        self.lineage.pop(partition, None)
        return held

    @staticmethod
    def _start_clock(state: State, partition: str, source: Sequence[Any] | None,
                     due: int | None) -> None:
        """`partition`'s clock at least `source`'s, its due no later than `due`."""
        name = CLOCK + partition.encode()
        held = state.get(name)
        clock = held[0] if held is not None else None
        if source is not None and source[0] is not None and (clock is None
                                                              or source[0] > clock):
            clock = source[0]
        soonest = held[1] if held is not None else None
        if due is not None and (soonest is None or due < soonest):
            soonest = due
        state[name] = [clock, soonest]


def with_timers(job: Job, timers: Timers, partitioner: str = "consistent_random") -> Job:
    """`job` itself when it sets no timers (its class does not override `on_timer`), else
    a `TimedJob` around it."""
    if not uses_timers(job):
        return job
    return TimedJob(job, timers, partitioner)
