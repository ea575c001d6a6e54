"""Timers: a job's `on_timer` called when a time it named is reached, per key; the
rules, the registry a job sets them through (`Timers`) and their entries in the state.
The wrapper that fires them as records arrive is processor/timed_job.py.

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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from store import State

__all__ = ["CLOCK", "RESERVED", "STREAM", "WALL", "Timer", "TimerError", "Timers",
           "child_timer_key", "parse_entry", "pending_timers", "stream_prefix", "timer_entry"]

# the state keys timers use; a job's own bytes keys never start with a NUL byte and
# "baton/" (docs/jobs.md, "Timers")
RESERVED = b"\x00baton/"
CLOCK = RESERVED + b"clock/"
STREAM = RESERVED + b"stream/"
WALL = RESERVED + b"wall/"
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


def timer_entry(prefix: bytes, time: int, key: bytes | None, name: str) -> bytes:
    head = prefix + _STAMP.pack(time + _BIAS)
    if key is None:
        return head + _NO_KEY + name.encode()
    return head + _A_KEY + _LENGTH.pack(len(key)) + key + name.encode()


def parse_entry(raw: bytes | str, prefix: bytes) -> tuple[int, bytes | None, str]:
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


def stream_prefix(partition: str) -> bytes:
    return STREAM + partition.encode() + b"\x00"


def child_timer_key(raw: bytes, partitions: Iterable[str]) -> bool | None:
    """For a state key of the timers (`RESERVED`): whether it is the clock or a timer of
    one of `partitions` (a split child's, which its parent drops once the child is
    live). None for any other key: a key of the job's own."""
    if not raw.startswith(RESERVED):
        return None
    for partition in partitions:
        name = partition.encode()
        if raw == CLOCK + name or raw.startswith(STREAM + name + b"\x00"):
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
        state[timer_entry(stream_prefix(self._partition), time_ms, self._key, name)] = 0
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
        state[timer_entry(WALL, time_ms, self._key, name)] = 0

    def cancel(self, time_ms: int, name: str = "", *, wall: bool = False) -> None:
        """Forget the current key's timer at `time_ms` named `name` (none: nothing)."""
        state = self._bound(time_ms, name)
        prefix = WALL if wall else stream_prefix(self._partition)
        state.pop(timer_entry(prefix, time_ms, self._key, name), None)

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


def pending_timers(items: Iterable[tuple[Any, Any]]) -> list[tuple[str, int, bytes | None, str]]:
    """The timers among a state's `(key, value)` items: (partition, or "wall", time,
    raw key, name), in key order (per partition, earliest first)."""
    found = []
    for raw, _ in items:
        if not isinstance(raw, bytes):
            continue
        if raw.startswith(WALL):
            found.append(("wall", *parse_entry(raw, WALL)))
        elif raw.startswith(STREAM):
            partition = raw[len(STREAM):raw.index(b"\x00", len(STREAM))]
            found.append((partition.decode(), *parse_entry(raw, stream_prefix(partition.decode()))))
    return found
