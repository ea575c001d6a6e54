"""Windows: per-key aggregates over spans of stream time, closed by stream-time timers.

A job keeps one window object per aggregate, made in `setup` from `context.timers`, and
hands it its records and its timers:

    class Clicks(Job):
        def setup(self, context):
            self.windows = Tumbling(context.timers, size_ms=60_000, grace_ms=5_000,
                                    name="clicks", add=lambda acc, record: acc + 1,
                                    initial=0)

        def process(self, record, state):
            yield from self.windows.process(record, state)

        def on_timer(self, timer, state):
            yield from self.windows.on_timer(timer, state)   # [] for others' timers

Rules
-----
* **The windows of a record** at timestamp `ts` (ms):
  - `Tumbling(size_ms)`: `[ts - ts % size, ts - ts % size + size)`.
  - `Hopping(size_ms, step_ms)`, `size` a multiple of `step`: every `[s, s + size)` with
    `s` a multiple of `step` and `0 <= s <= ts < s + size`. Windows start at 0 or later
    (as in Kafka Streams), so a record before `size` is in fewer of them.
  - `Sessions(gap_ms)`: a key's records less than `gap` apart form one session,
    `Window(first ts, last ts)`, both ends included (as Kafka Streams' session windows).
    A record less than `gap` from several open sessions merges them into one, whatever
    order the records come in.
* **Stream time** is the clock of the record's input partition, `timers.stream_time`:
  the largest timestamp processed from it, the current record's included
  (processor/timers.py).
* **Closing.** A window closes when its partition's stream time reaches its close time:
  `end + grace_ms` for tumbling and hopping windows (whose `end` is excluded), `last ts +
  gap_ms + grace_ms` for a session. Each window has one stream-time timer, at its close
  time, named `<name>/<start, 19 digits>` (so window objects in one job do not collide; a
  job's own timers must not be named so). A session that grows or merges moves its timer.
  The timer fires before the record that moved the clock there, so a window is closed
  before that record is looked at.
* **Late records are dropped**, without a trace. A tumbling or hopping record is added to
  each of its windows not closed at its stream time, and is lost if none is left. A
  session record is late when the session of it alone would already be closed (`ts + gap
  + grace <= stream time`); otherwise it joins the open sessions less than `gap` from it:
  a closed session is final, and a record near it starts a new one. Nothing counts the
  drops: a count kept on the window object would differ between the owner and a replay
  that began midway, and one kept in the state would cost a write per late record.
  Records without a timestamp (-1) are in no window: ignored.
* **The fold.** Each window's value starts as a deep copy of `initial` and takes
  `add(acc, record) -> acc` for every record added to it. Values are JSON (they live in
  the state: a tuple reads back as a list). The open sessions a record bridges are
  combined with `merge(acc1, acc2) -> acc` in start order, then the record is added.
* **Emission.** `emit="close"` (the default): one output per window, when it closes.
  `emit="update"`: the window's result after every record added to it (a record in
  several hopping windows: one per window, in start order; a record that merges
  sessions: one, for the merged session) and nothing at the close. An output is
  `result(key, window, acc)`, by default `(key, json.dumps({"start": s, "end": e,
  "value": acc}))`, stamped with the largest timestamp among the window's records (Kafka
  Streams' rule: it depends on the window's records alone, never on the record whose
  clock closed it, and an output is never ahead of the stream), unless `result` returns
  an `Output` with a timestamp of its own.
* **Retention.** A window's entry stays in the state until the stream time reaches `end +
  retention_ms` (a session's: `last ts + gap + retention_ms`), readable meanwhile with
  `values(state, key)`; the close timer is set again for that time and deletes it.
  `retention_ms` defaults to `grace_ms`: the close deletes it.
* **State.** A window is the entry `<record key>/<name>/<start, 19 digits>` (str for a str
  record key, bytes for bytes), holding `[largest timestamp, acc]`: a prefix scan lists a
  key's windows in start order, and a split keeps them with their key (docs/jobs.md,
  "Prefix scans"). Records need a key, bytes or str (`key_format` "bytes", "str", or
  "json" with string keys).
"""

from __future__ import annotations

import copy
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Generic, Literal, TypeVar

from processor.job import Emitted, Output, Record, State
from processor.timers import Timer, Timers

__all__ = ["Emit", "Hopping", "Sessions", "Tumbling", "Window", "WindowKey", "Windows",
           "as_json"]

Emit = Literal["close", "update"]
WindowKey = bytes | str
A = TypeVar("A")
_EMITS = ("close", "update")
# a window's start in its state key and timer name: int64 milliseconds have at most 19
# digits, so padding to 19 makes text order number order
_DIGITS = 19


@dataclass(frozen=True, slots=True)
class Window:
    """A window's span (ms): `[start, end)` for tumbling and hopping windows; for a
    session, its first and last records' timestamps, both included."""

    start: int
    end: int


def as_json(key: WindowKey, window: Window, acc: object) -> Emitted:
    """The default result: `(key, '{"start": s, "end": e, "value": acc}')`."""
    return key, json.dumps({"start": window.start, "end": window.end, "value": acc})


class Windows(ABC, Generic[A]):
    """What every kind of window shares: the state entries, the timers, the emission.

    A subclass says which windows a record goes to (`process`) and how far a window's
    close and deletion lie beyond its end (`_reach`).
    """

    def __init__(self, timers: Timers, *, name: str, add: Callable[[A, Record], A],
                 initial: A, grace_ms: int = 0, retention_ms: int | None = None,
                 emit: Emit = "close",
                 result: Callable[[WindowKey, Window, A], Emitted] = as_json) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"name must be a non-empty str without '/' (it names the "
                             f"windows' state entries and timers), got {name!r}")
        _check_ms("grace_ms", grace_ms, 0)
        retention = grace_ms if retention_ms is None else retention_ms
        _check_ms("retention_ms", retention, grace_ms, f"grace_ms ({grace_ms})")
        if not callable(add):
            raise ValueError(f"add must be a function (acc, record) -> acc, got {add!r}")
        if emit not in _EMITS:
            raise ValueError(f"emit must be 'close' or 'update', got {emit!r}")
        try:
            json.dumps(initial)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"initial must be a JSON value (it is kept in the state), "
                             f"got {initial!r}: {exc}") from None
        self.timers = timers
        self.name = name
        self.add = add
        self.initial = initial
        self.grace_ms = grace_ms
        self.retention_ms = retention
        self.emit: Emit = emit
        self.result = result

    @abstractmethod
    def process(self, record: Record, state: State) -> list[Emitted]:
        """Add `record` to its windows that are still open (module docstring).

        Returns:
            With `emit="update"`, each updated window's result; else nothing.

        Raises:
            ValueError: the record has no key.
            TypeError: its key is neither bytes nor str.
            RuntimeError: the job does not run its timers (it does not override
                `on_timer`).
        """

    def on_timer(self, timer: Timer, state: State) -> list[Emitted]:
        """Close or delete the window `timer` is for; nothing for a timer of another
        window object's or of the job's own.

        Returns:
            With `emit="close"`, the closing window's result; else nothing.
        """
        start = self._start_of(timer)
        if start is None:
            return []
        entry = self._entry(timer.key, start)
        held = state.get(entry)
        if held is None:
            return []
        latest, acc = held
        window = self._window(start, latest)
        close = window.end + self._reach(self.grace_ms)
        if timer.time < close:
            return []                   # not this window's timer any more
        outputs = []
        if timer.time == close and self.emit == "close":
            outputs.append(self._output(timer.key, window, latest, acc))
        drop = window.end + self._reach(self.retention_ms)
        if drop <= timer.time:
            del state[entry]
        else:
            self.timers.at(drop, timer.name)
        return outputs

    def values(self, state: State, key: WindowKey) -> list[tuple[Window, A]]:
        """The windows of `key` held in the state (open, and closed ones within their
        retention), in start order, each with its value."""
        prefix = self._prefix(key)
        found = []
        for raw, (latest, acc) in state.scan(prefix):
            tail = raw[len(prefix):]
            if len(tail) == _DIGITS and tail.isdigit():    # not a longer key's entry
                found.append((self._window(int(tail), latest), acc))
        return found

    def _reach(self, beyond: int) -> int:
        """How far past a window's `end` its grace (or retention) `beyond` runs out:
        `beyond` itself; for a session, whose `end` is its last record, `gap + beyond`."""
        return beyond

    @abstractmethod
    def _window(self, start: int, latest: int) -> Window:
        """The window starting at `start` whose largest timestamp is `latest`."""

    def _clock(self, record: Record) -> int | None:
        """The record's stream time; None for a record without a timestamp."""
        if record.timestamp < 0:
            return None
        clock = self.timers.stream_time
        if clock is None:
            raise RuntimeError(f"window {self.name!r}: the job's timers do not run: its "
                               f"class must override on_timer() and pass the timers to "
                               f"the window's on_timer()")
        return clock

    def _start_of(self, timer: Timer) -> int | None:
        """The start of the window `timer` closes, if it is one of ours."""
        head, _, tail = timer.name.rpartition("/")
        if timer.wall or head != self.name or len(tail) != _DIGITS or not tail.isdigit():
            return None
        return int(tail)

    def _timer_name(self, start: int) -> str:
        return f"{self.name}/{start:0{_DIGITS}d}"

    def _prefix(self, key: WindowKey) -> WindowKey:
        if isinstance(key, str):
            return f"{key}/{self.name}/"
        return key + b"/" + self.name.encode() + b"/"

    def _entry(self, key: WindowKey, start: int) -> WindowKey:
        digits = f"{start:0{_DIGITS}d}"
        prefix = self._prefix(key)
        return prefix + digits if isinstance(prefix, str) else prefix + digits.encode()

    def _fresh(self) -> A:
        return copy.deepcopy(self.initial)

    def _output(self, key: WindowKey, window: Window, latest: int, acc: A) -> Emitted:
        """`result(key, window, acc)`, stamped `latest` unless it says otherwise."""
        made = self.result(key, window, acc)
        if isinstance(made, Output):
            return made if made.timestamp is not None else replace(made, timestamp=latest)
        if isinstance(made, tuple | list) and len(made) == 2:
            return Output(made[0], made[1], timestamp=latest)
        return made                     # refused where outputs are checked


class Hopping(Windows[A]):
    """Windows of `size_ms` starting every `step_ms` (module docstring).

    Args:
        timers: `context.timers`.
        size_ms: a window's length; a multiple of `step_ms`.
        step_ms: how far apart windows start.
        name: names the windows' state entries and timers (unique within the job).
        add: `add(acc, record) -> acc`.
        initial: each window's starting value (JSON).
        grace_ms: how long after its end a window still takes late records.
        retention_ms: how long after its end a window's entry is kept (>= grace_ms;
            default grace_ms).
        emit: "close" (one result per window) or "update" (one per record added).
        result: `result(key, window, acc) -> output`.

    Raises:
        ValueError: an argument out of range (the message names it).
    """

    def __init__(self, timers: Timers, size_ms: int, step_ms: int, *, name: str,
                 add: Callable[[A, Record], A], initial: A, grace_ms: int = 0,
                 retention_ms: int | None = None, emit: Emit = "close",
                 result: Callable[[WindowKey, Window, A], Emitted] = as_json) -> None:
        _check_ms("size_ms", size_ms, 1)
        _check_ms("step_ms", step_ms, 1)
        if size_ms % step_ms:
            raise ValueError(f"step_ms must divide size_ms, got size_ms={size_ms}, "
                             f"step_ms={step_ms}")
        super().__init__(timers, name=name, add=add, initial=initial, grace_ms=grace_ms,
                         retention_ms=retention_ms, emit=emit, result=result)
        self.size_ms = size_ms
        self.step_ms = step_ms

    def process(self, record: Record, state: State) -> list[Emitted]:
        clock = self._clock(record)
        if clock is None:
            return []
        key = _key_of(record)
        stamp = record.timestamp
        outputs = []
        for start in self._starts(stamp):
            window = Window(start, start + self.size_ms)
            close = window.end + self.grace_ms
            if close <= clock:
                continue                # closed: late for this window
            entry = self._entry(key, start)
            held = state.get(entry)
            if held is None:
                latest, acc = stamp, self._fresh()
                self.timers.at(close, self._timer_name(start))
            else:
                latest, acc = max(held[0], stamp), held[1]
            acc = self.add(acc, record)
            state[entry] = [latest, acc]
            if self.emit == "update":
                outputs.append(self._output(key, window, latest, acc))
        return outputs

    def _starts(self, stamp: int) -> range:
        """The starts of the windows `stamp` is in, earliest first (none below 0)."""
        last = stamp - stamp % self.step_ms
        first = max(0, last - self.size_ms + self.step_ms)
        return range(first, last + 1, self.step_ms)

    def _window(self, start: int, latest: int) -> Window:
        return Window(start, start + self.size_ms)


class Tumbling(Hopping[A]):
    """Windows of `size_ms`, one after the other: hopping windows whose step is their
    size (see `Hopping` for the arguments)."""

    def __init__(self, timers: Timers, size_ms: int, *, name: str,
                 add: Callable[[A, Record], A], initial: A, grace_ms: int = 0,
                 retention_ms: int | None = None, emit: Emit = "close",
                 result: Callable[[WindowKey, Window, A], Emitted] = as_json) -> None:
        super().__init__(timers, size_ms, size_ms, name=name, add=add, initial=initial,
                         grace_ms=grace_ms, retention_ms=retention_ms, emit=emit,
                         result=result)


class Sessions(Windows[A]):
    """A key's runs of records less than `gap_ms` apart (module docstring).

    Args:
        timers: `context.timers`.
        gap_ms: the inactivity, in stream time, that ends a session.
        merge: `merge(acc1, acc2) -> acc`, the value of two sessions a record joins
            (`acc1` the earlier session's).
        The others: as `Hopping`'s; grace and retention count from `last ts + gap_ms`.

    Raises:
        ValueError: an argument out of range (the message names it).
    """

    def __init__(self, timers: Timers, gap_ms: int, *, name: str,
                 add: Callable[[A, Record], A], merge: Callable[[A, A], A], initial: A,
                 grace_ms: int = 0, retention_ms: int | None = None, emit: Emit = "close",
                 result: Callable[[WindowKey, Window, A], Emitted] = as_json) -> None:
        _check_ms("gap_ms", gap_ms, 1)
        if not callable(merge):
            raise ValueError(f"merge must be a function (acc1, acc2) -> acc, got {merge!r}")
        super().__init__(timers, name=name, add=add, initial=initial, grace_ms=grace_ms,
                         retention_ms=retention_ms, emit=emit, result=result)
        self.gap_ms = gap_ms
        self.merge = merge

    def process(self, record: Record, state: State) -> list[Emitted]:
        clock = self._clock(record)
        if clock is None:
            return []
        key = _key_of(record)
        stamp = record.timestamp
        if stamp + self._reach(self.grace_ms) <= clock:
            return []                   # its session would be closed already: late
        joined = self._joined(key, stamp, clock, state)
        start = min([stamp, *(window.start for window, _ in joined)])
        latest = max([stamp, *(window.end for window, _ in joined)])
        acc = self._fresh() if not joined else joined[0][1]
        for _, other in joined[1:]:
            acc = self.merge(acc, other)
        acc = self.add(acc, record)
        for window, _ in joined:        # their timers and entries give way to the new one
            self.timers.cancel(window.end + self._reach(self.grace_ms),
                               self._timer_name(window.start))
            del state[self._entry(key, window.start)]
        state[self._entry(key, start)] = [latest, acc]
        self.timers.at(latest + self._reach(self.grace_ms), self._timer_name(start))
        if self.emit == "update":
            return [self._output(key, Window(start, latest), latest, acc)]
        return []

    def _joined(self, key: WindowKey, stamp: int, clock: int, state: State
                ) -> list[tuple[Window, A]]:
        """The key's open sessions a record at `stamp` joins, in start order."""
        gap = self.gap_ms
        return [(window, acc) for window, acc in self.values(state, key)
                if window.end + self._reach(self.grace_ms) > clock
                and window.start - gap < stamp < window.end + gap]

    def _reach(self, beyond: int) -> int:
        return self.gap_ms + beyond

    def _window(self, start: int, latest: int) -> Window:
        return Window(start, latest)


def _check_ms(argument: str, value: object, least: int, bound: str = "") -> None:
    """`value` is an int (ms) of at least `least` (`bound`: what that is, when it is
    another argument), else a ValueError naming `argument`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{argument} must be an int (ms), got {value!r}")
    if value < least:
        raise ValueError(f"{argument} must be >= {bound or least}, got {value}")


def _key_of(record: Record) -> WindowKey:
    """The record's key, which names its windows' entries."""
    key: object = record.key
    if isinstance(key, bytes | str):
        return key
    where = f"{record.topic}:{record.partition} offset {record.offset}"
    if key is None:
        raise ValueError(f"{where}: windows are per key, and this record has none")
    raise TypeError(f"{where}: a window's key is bytes or str ([job] key_format \"bytes\" "
                    f"or \"str\"), got {type(key).__name__}: {key!r}")
