"""Timers: a job's `on_timer` called when a time it named is reached, per key.

Theory of operation
-------------------
* **Stream-time timers** (`context.timers.at(ms)`) fire when the task's records pass a
  timestamp. The clock is per input partition: the largest timestamp of the records
  processed from it (`stream_time`). Every path that rebuilds a task's state (a
  warmup, a standby, the activation's replay to T1, a restart from the store) reads a
  partition's records in offset order, so the clock passes each timer at the same
  record on every path, and `on_timer` changes the state exactly as it did on the
  owner: the timers are as deterministic as `process()`.
* **When they fire.** Before a record is processed, every timer of its partition at or
  before the clock (the record's timestamp included) fires, in time order, then the
  record is processed. A timer set for a time the clock has already passed fires before
  the partition's next record. What `on_timer` yields goes out with the record that
  moved the clock, in its transaction: a timer fires once, exactly, with its outputs.
  A partition with no new record moves no clock: stream time stands still while the
  input is idle (wall-clock timers are for that).
* **Wall-clock timers** (`context.timers.at_wall(ms)`) fire on the active owner only,
  once the processor's clock reaches the time (within the loop's turn, about 100 ms),
  inside a transaction with their outputs. A replay of the input cannot know when they
  fired, so they need `catch_up.source = "changelog"`, where every copy of the state is
  the owner's own writes (the fired timer's delete included).
* **Stored in the task's state**, under bytes keys that start with `RESERVED`, so they
  commit with the record that set them, are undone with a record that raised, move with
  the task in a handoff (rebuilt by the replay, or carried by the changelog) and after a
  SIGKILL are where the last commit left them.
* **Per key.** A timer belongs to the key of the record being processed (or of the timer
  firing) when it is set; `on_timer` is called with that key, and one (time, name) per
  key is one timer. Keys are the records' raw bytes, so a split can tell where each
  timer's key now lives.
* **Splits.** A split child replays its parent partition's records through its key
  filter; the records of other keys still move the parent partition's clock
  (`pass_over`), so the child's keys' timers fire where the parent fired them. Where
  the parent's records stop (its barrier), a key's records continue on the child
  partition: at the barrier marker the parent moves the timers of keys homed on a child
  to the child partition's clock, which starts at the parent's (`rehome`); the child
  does the same before its partition's first record (`inherit`). Once the child is live
  the parent drops those timers with the child's keys (`child_timer_key`).

Storage: ``RESERVED + b"clock/" + partition`` holds ``[clock, due]`` (the partition's
stream time and the earliest time any of its timers may be due: a lower bound, so a
timer cancelled leaves it early and costs one look); a timer is an entry named by its
partition (or ``wall``), its time (8 bytes, ordered), its key and its name, in that
order, so the earliest is the first of a prefix scan.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.wire.partitioners import home_partition
from processor.job import Context, Emitted, Job, Record, State

__all__ = ["RESERVED", "Timer", "TimerError", "Timers", "TimedJob", "child_timer_key",
           "pending_timers", "uses_timers", "with_timers"]

# the state keys timers use; a job's own bytes keys never start with a NUL byte and
# "baton/" (docs/jobs.md, "Timers")
RESERVED = b"\x00baton/"
_CLOCK = RESERVED + b"clock/"
_STREAM = RESERVED + b"stream/"
_WALL = RESERVED + b"wall/"
_STAMP = struct.Struct(">Q")           # time + 2**63: unsigned, so byte order is time order
_LENGTH = struct.Struct(">I")
_BIAS = 1 << 63
_NO_KEY = b"\x00"                      # a timer of a record without a key
_A_KEY = b"\x01"


@dataclass(frozen=True, slots=True)
class Timer:
    """A timer that fired: the key it was set for (as `process()` sees keys), its time
    (ms: stream time, or since the epoch for a wall-clock timer) and its name."""

    key: Any
    time: int
    name: str = ""
    wall: bool = False


class TimerError(RuntimeError):
    """`on_timer` raised, or a timer was set where none can be: the task stops (its
    records' `on_error` is not for timers; docs/jobs.md, "Timers")."""


def uses_timers(job: Job | type[Job]) -> bool:
    """Whether the job's class overrides `on_timer` (only such jobs are wrapped)."""
    cls = job if isinstance(job, type) else type(job)
    inner = getattr(job, "inner", None)
    if inner is not None and not isinstance(job, type):
        return uses_timers(inner)
    return getattr(cls, "on_timer", Job.on_timer) is not Job.on_timer


def _entry(prefix: bytes, time: int, key: bytes | None, name: str) -> bytes:
    head = prefix + _STAMP.pack(time + _BIAS)
    if key is None:
        return head + _NO_KEY + name.encode()
    return head + _A_KEY + _LENGTH.pack(len(key)) + key + name.encode()


def _parse(raw: bytes | str, prefix: bytes) -> tuple[int, bytes | None, str]:
    """(time, key, name) of the timer entry `raw` under `prefix` (a bytes prefix's scan
    yields bytes keys only)."""
    assert isinstance(raw, bytes)
    at = len(prefix)
    time = _STAMP.unpack_from(raw, at)[0] - _BIAS
    at += _STAMP.size
    if raw[at:at + 1] == _NO_KEY:
        return time, None, raw[at + 1:].decode()
    length = _LENGTH.unpack_from(raw, at + 1)[0]
    start = at + 1 + _LENGTH.size
    return time, raw[start:start + length], raw[start + length:].decode()


def _stream_prefix(partition: str) -> bytes:
    return _STREAM + partition.encode() + b"\x00"


def child_timer_key(raw: bytes, partitions: Iterable[str]) -> bool | None:
    """For a state key of the timers (`RESERVED`): whether it is the clock or a timer of
    one of `partitions` (a split child's, which its parent drops once the child is
    live). None for any other key: a key of the job's own."""
    if not raw.startswith(RESERVED):
        return None
    for partition in partitions:
        name = partition.encode()
        if raw == _CLOCK + name or raw.startswith(_STREAM + name + b"\x00"):
            return True
    return False


class Timers:
    """What a job sets timers through (`context.timers`), for the current key.

    Args:
        wall: whether wall-clock timers may be set (`catch_up.source = "changelog"`,
            or `processor.testing`).
    """

    def __init__(self, wall: bool = False) -> None:
        self.wall = wall
        self._state: State | None = None
        self._partition = ""
        self._key: bytes | None = None
        self._clock: int | None = None
        self._due: int | None = None

    def at(self, time_ms: int, name: str = "") -> None:
        """Call `on_timer` for the current key once the stream time of the current
        record's partition reaches `time_ms` (one timer per key, time and name: setting
        it again changes nothing).

        Raises:
            TimerError: outside `process()` and `on_timer()`.
            TypeError: `time_ms` is not an int, or `name` not a str.
        """
        state = self._bound(time_ms, name)
        state[_entry(_stream_prefix(self._partition), time_ms, self._key, name)] = 0
        if self._due is None or time_ms < self._due:
            self._due = time_ms

    def at_wall(self, time_ms: int, name: str = "") -> None:
        """Call `on_timer` for the current key once the processor's clock reaches
        `time_ms` (ms since the epoch), on the active owner only.

        Raises:
            TimerError: outside `process()` and `on_timer()`, or the job rebuilds its
                state from its input (`catch_up.source = "input"`): a replay cannot know
                whether the owner fired it.
        """
        if not self.wall:
            raise TimerError("wall-clock timers need catch_up.source = \"changelog\": a "
                             "replay of the input cannot tell whether the owner fired one")
        state = self._bound(time_ms, name)
        state[_entry(_WALL, time_ms, self._key, name)] = 0

    def cancel(self, time_ms: int, name: str = "", *, wall: bool = False) -> None:
        """Forget the current key's timer at `time_ms` named `name` (none: nothing)."""
        state = self._bound(time_ms, name)
        prefix = _WALL if wall else _stream_prefix(self._partition)
        state.pop(_entry(prefix, time_ms, self._key, name), None)

    @property
    def stream_time(self) -> int | None:
        """The stream time of the current record's partition (None before its first)."""
        return self._clock

    def _bound(self, time_ms: int, name: str) -> State:
        if self._state is None:
            raise TimerError("timers are set from process() or on_timer(), for the key "
                             "being processed")
        if isinstance(time_ms, bool) or not isinstance(time_ms, int):
            raise TypeError(f"a timer's time is an int (ms), got {time_ms!r}")
        if not isinstance(name, str):
            raise TypeError(f"a timer's name is a str, got {name!r}")
        return self._state

    def _enter(self, state: State, partition: str, clock: int | None,
               due: int | None) -> None:
        self._state, self._partition, self._clock, self._due = state, partition, clock, due

    def _leave(self) -> None:
        self._state = None


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
        partition, clock, due = self._advance(record, state, outputs)
        timers._enter(state, partition, clock, due)
        timers._key = record.key
        try:
            outputs.extend(self.inner.process(record, state) or ())
        finally:
            timers._leave()
        self._store_clock(state, partition, clock, timers._due)
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
        partition, clock, due = self._advance(record, state, outputs)
        self._store_clock(state, partition, clock, due)
        return outputs

    def on_timer(self, timer: Timer, state: State) -> Iterable[Emitted]:
        return self.inner.on_timer(timer, state)

    def _advance(self, record: Record, state: State, outputs: list[Emitted]
                 ) -> tuple[str, int | None, int | None]:
        partition = f"{record.topic}:{record.partition}"
        held = state.get(_CLOCK + partition.encode())
        if held is None and partition in self.lineage:
            held = self.inherit(partition, state)
        clock, due = (None, None) if held is None else held
        stamp = record.timestamp
        if stamp >= 0 and (clock is None or stamp > clock):
            clock = stamp
        if due is not None and clock is not None and due <= clock:
            due = self._fire(state, partition, clock, outputs)
        return partition, clock, due

    def _store_clock(self, state: State, partition: str, clock: int | None,
                     due: int | None) -> None:
        name = _CLOCK + partition.encode()
        if clock is None and due is None:
            return
        held = state.get(name)
        if held is None or held[0] != clock or held[1] != due:
            state[name] = [clock, due]

    def _fire(self, state: State, partition: str, clock: int, outputs: list[Emitted]
              ) -> int | None:
        """Fire the partition's timers due at `clock`, earliest first (those set while
        firing too); return the time of the first one left."""
        prefix = _stream_prefix(partition)
        timers = self.timers
        while True:
            first = next(state.scan(prefix), None)
            if first is None:
                return None
            time, key, name = _parse(first[0], prefix)
            if time > clock:
                return time
            del state[first[0]]
            timers._enter(state, partition, clock, None)
            timers._key = key
            try:
                outputs.extend(self.inner.on_timer(Timer(key, time, name), state) or ())
            except TimerError:
                raise
            except Exception as exc:  # noqa: BLE001 - user code: named, then the task stops
                raise TimerError(f"on_timer() raised for the timer at {time} (key {key!r}, "
                                 f"name {name!r}) of {partition}: {exc!r}") from exc
            finally:
                timers._leave()

    def fire_wall(self, now_ms: int, state: State) -> tuple[Timer, list[Emitted]] | None:
        """Fire the earliest wall-clock timer due at `now_ms` (deleted, `on_timer`
        called): it and its outputs; None when none is due. The caller fires one at a
        time, each a record's worth of the transaction."""
        first = next(state.scan(_WALL), None)
        if first is None:
            return None
        time, key, name = _parse(first[0], _WALL)
        if time > now_ms:
            return None
        del state[first[0]]
        timers = self.timers
        timers._enter(state, "", None, None)
        timers._key = key
        timer = Timer(key, time, name, wall=True)
        try:
            return timer, list(self.inner.on_timer(timer, state) or ())
        except Exception as exc:  # noqa: BLE001 - user code: named, then the task stops
            raise TimerError(f"on_timer() raised for the wall-clock timer at {time} "
                             f"(key {key!r}, name {name!r}): {exc!r}") from exc
        finally:
            timers._leave()

    def next_wall(self, state: State) -> int | None:
        """When the earliest wall-clock timer is due (None: there is none)."""
        first = next(state.scan(_WALL), None)
        return None if first is None else _parse(first[0], _WALL)[0]

    def rehome(self, partition: str, children: Sequence[str], count: int, state: State
               ) -> None:
        """The barrier marker of `partition` for `children` was read (the input now has
        `count` partitions): the children's clocks start at this one's, and the timers
        whose key now lives on one of them move there."""
        topic, _, number = partition.rpartition(":")
        held = state.get(_CLOCK + partition.encode())
        if held is None:
            return                      # no record, so no timer, here yet
        for child in children:
            self._start_clock(state, child, held, None)
        prefix = _stream_prefix(partition)
        for raw, _ in list(state.scan(prefix)):
            time, key, name = _parse(raw, prefix)
            home = home_partition(self.partitioner, key, count)
            target = f"{topic}:{home}"
            if home is None or str(home) == number or target not in children:
                continue
            del state[raw]
            state[_entry(_stream_prefix(target), time, key, name)] = 0
            self._start_clock(state, target, None, time)

    def inherit(self, partition: str, state: State) -> list[Any] | None:
        """Before the first record of a split child's own `partition`: the timers its
        ancestors' replay set move here, and the clock starts at theirs."""
        held: list[Any] | None = None
        for ancestor in self.lineage.get(partition, ()):
            prefix = _stream_prefix(ancestor)
            before = state.get(_CLOCK + ancestor.encode())
            for raw, _ in list(state.scan(prefix)):
                time, key, name = _parse(raw, prefix)
                del state[raw]
                state[_entry(_stream_prefix(partition), time, key, name)] = 0
                self._start_clock(state, partition, before, time)
            if before is not None:
                self._start_clock(state, partition, before, None)
        held = state.get(_CLOCK + partition.encode())
        self.lineage.pop(partition, None)
        return held

    @staticmethod
    def _start_clock(state: State, partition: str, source: Sequence[Any] | None,
                     due: int | None) -> None:
        """`partition`'s clock at least `source`'s, its due no later than `due`."""
        name = _CLOCK + partition.encode()
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


def pending_timers(items: Iterable[tuple[Any, Any]]) -> list[tuple[str, int, bytes | None, str]]:
    """The timers among a state's `(key, value)` items: (partition, or "wall", time,
    raw key, name), in key order (per partition, earliest first)."""
    found = []
    for raw, _ in items:
        if not isinstance(raw, bytes):
            continue
        if raw.startswith(_WALL):
            found.append(("wall", *_parse(raw, _WALL)))
        elif raw.startswith(_STREAM):
            partition = raw[len(_STREAM):raw.index(b"\x00", len(_STREAM))]
            found.append((partition.decode(), *_parse(raw, _stream_prefix(partition.decode()))))
    return found
