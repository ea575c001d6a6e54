"""Windows (processor/windows.py) on the task store, through the timers as the runtime
runs them: each kind and emit mode against a brute-force model of the module's rules,
recomputed from the event list, then the rules one example at a time."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor import Context, Emitted, Job, Output, Record, State, Timer
from processor.testing import JobHarness
from processor.timers import Timers
from processor.windows import Hopping, Sessions, Tumbling, Window, Windows

KEYS = ("a", "b", "c")
# (key, timestamp); a record's offset is its index, and -1 is a record without timestamp
Event = tuple[str, int]
# per key: (the output's JSON value, its timestamp), in the order the key's came out
Outputs = dict[str, list[tuple[Any, int]]]
Held = dict[str, list[tuple[Window, Any]]]
EXAMPLES = settings(max_examples=60, deadline=None)
# every window starts from a copy of its initial value, so one list serves them all (and
# its type, unlike a bare `[]`'s, tells mypy what the windows hold)
NO_OFFSETS: list[int] = []


def _append(acc: list[int], record: Record) -> list[int]:
    return [*acc, record.offset]


def _insert(acc: list[int], record: Record) -> list[int]:
    return sorted([*acc, record.offset])


def _union(first: list[int], second: list[int]) -> list[int]:
    return sorted(first + second)


class WindowJob(Job):
    """One window object, of the kind and sizes its params say; each window's value is
    the offsets of its records (sorted, for sessions, so that the model need not know
    the order merges combine them in)."""

    windows: Windows[Any]

    def setup(self, context: Context) -> None:
        p = dict(self.params)
        common: dict[str, Any] = {
            "name": p.get("name", "w"), "initial": NO_OFFSETS, "grace_ms": p["grace"],
            "retention_ms": p["retention"], "emit": p["emit"]}
        if p["kind"] == "sessions":
            self.windows = Sessions(context.timers, p["gap"], add=_insert, merge=_union,
                                    **common)
        elif p["kind"] == "tumbling":
            self.windows = Tumbling(context.timers, p["size"], add=_append, **common)
        else:
            self.windows = Hopping(context.timers, p["size"], p["step"], add=_append,
                                   **common)

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        yield from self.windows.process(record, state)

    def on_timer(self, timer: Timer, state: State) -> Iterator[Emitted]:
        yield from self.windows.on_timer(timer, state)


def _inner(job: Job) -> Any:
    """The job under the harness's wrappers (timers, formats)."""
    while hasattr(job, "inner"):
        job = job.inner
    return job


def run_windows(params: dict[str, Any], events: list[Event], commit_every: int = 1
                ) -> tuple[Outputs, Held]:
    """`events` through a WindowJob: its outputs per key, and the windows it holds at
    the end per key (`values`)."""
    outputs: Outputs = defaultdict(list)
    with JobHarness(WindowJob, params=params, commit_every=commit_every) as harness:
        for offset, (key, stamp) in enumerate(events):
            record = Record(key.encode(), b"", "input", 0, offset, stamp)
            for out in harness.send(record):
                assert isinstance(out.key, bytes) and out.value is not None
                assert out.timestamp is not None
                outputs[out.key.decode()].append((json.loads(out.value), out.timestamp))
        windows = _inner(harness.job).windows
        held = {key: windows.values(harness.store.state, key.encode()) for key in KEYS}
    return dict(outputs), {key: found for key, found in held.items() if found}


def _clocks(events: list[Event]) -> list[int | None]:
    """The partition's stream time at each event: the running max of the timestamps."""
    clocks: list[int | None] = []
    clock: int | None = None
    for _, stamp in events:
        if stamp >= 0:
            clock = stamp if clock is None else max(clock, stamp)
        clocks.append(clock)
    return clocks


def fixed_model(events: list[Event], size: int, step: int, grace: int, retention: int,
                emit: str) -> tuple[Outputs, Held]:
    """Tumbling (step == size) and hopping windows, window by window: a window takes the
    key's records in it that come before the first event whose clock reaches its close;
    it is emitted just before that event (close), or after each record it took
    (update); it is held at the end unless the last clock reached end + retention."""
    clocks = _clocks(events)
    final = clocks[-1] if clocks else None
    found: dict[str, list[tuple[tuple[int, int, int], Any, int]]] = defaultdict(list)
    held: Held = defaultdict(list)
    starts = {(k, s) for k, t in events if t >= 0
              for s in range(0, t + 1, step) if s <= t < s + size}
    for key, start in sorted(starts):
        end, close = start + size, start + size + grace
        closing = next((i for i, c in enumerate(clocks) if c is not None and c >= close),
                       None)
        members = [(i, t) for i, (k, t) in enumerate(events)
                   if k == key and t >= 0 and start <= t < end
                   and (closing is None or i < closing)]
        if not members:
            continue
        if emit == "close" and closing is not None:
            value = {"start": start, "end": end, "value": [i for i, _ in members]}
            found[key].append(((closing, 0, close), value, max(t for _, t in members)))
        if emit == "update":
            for n, (i, _) in enumerate(members):
                taken = members[:n + 1]
                value = {"start": start, "end": end, "value": [j for j, _ in taken]}
                found[key].append(((i, 1, start), value, max(t for _, t in taken)))
        if final is None or end + retention > final:
            held[key].append((Window(start, end), [i for i, _ in members]))
    return _in_order(found), dict(held)


@dataclass
class _Session:
    start: int
    end: int
    offsets: list[int] = field(default_factory=list)


def sessions_model(events: list[Event], gap: int, grace: int, retention: int, emit: str
                   ) -> tuple[Outputs, Held]:
    """Sessions, event by event: the clock moves, the sessions whose last + gap + grace
    it reached close (in close-time order), then the record is late (its session alone
    would be closed), or joins and merges every open session of its key it is less
    than gap from."""
    clock: int | None = None
    open_: dict[str, list[_Session]] = defaultdict(list)
    closed: dict[str, list[_Session]] = defaultdict(list)
    found: dict[str, list[tuple[tuple[int, int, int], Any, int]]] = defaultdict(list)

    def value(s: _Session) -> dict[str, Any]:
        return {"start": s.start, "end": s.end, "value": sorted(s.offsets)}

    for i, (key, stamp) in enumerate(events):
        if stamp < 0:
            continue
        clock = stamp if clock is None else max(clock, stamp)
        for k in KEYS:
            for s in [s for s in open_[k] if s.end + gap + grace <= clock]:
                open_[k].remove(s)
                closed[k].append(s)
                if emit == "close":
                    found[k].append(((i, 0, s.end + gap + grace), value(s), s.end))
        if stamp + gap + grace <= clock:
            continue
        joined = [s for s in open_[key] if s.start - gap < stamp < s.end + gap]
        merged = _Session(min([stamp, *(s.start for s in joined)]),
                          max([stamp, *(s.end for s in joined)]),
                          [i, *(o for s in joined for o in s.offsets)])
        open_[key] = [s for s in open_[key] if s not in joined] + [merged]
        if emit == "update":
            found[key].append(((i, 1, 0), value(merged), merged.end))
    held: Held = {}
    for key in KEYS:
        kept = [s for s in closed[key] + open_[key]
                if clock is None or s.end + gap + retention > clock]
        if kept:
            held[key] = [(Window(s.start, s.end), sorted(s.offsets))
                         for s in sorted(kept, key=lambda s: s.start)]
    return _in_order(found), held


def _in_order(found: dict[str, list[tuple[tuple[int, int, int], Any, int]]]) -> Outputs:
    """Per key, the outputs in the order they come: by event, closes (by close time)
    before the event's own updates (by window start)."""
    return {key: [(value, stamp) for _, value, stamp in sorted(items, key=lambda x: x[0])]
            for key, items in found.items() if items}


@st.composite
def event_lists(draw: st.DrawFn, span: int) -> list[Event]:
    """Timestamps mostly rising by up to `span`, some records late by up to 3 spans
    (often beyond grace), a few without timestamp."""
    now, events = 0, []
    for _ in range(draw(st.integers(0, 40))):
        now += draw(st.integers(0, span))
        back = draw(st.one_of(st.just(0), st.just(0), st.integers(1, 3 * span)))
        stamp = -1 if draw(st.integers(0, 24)) == 0 else max(0, now - back)
        events.append((draw(st.sampled_from(KEYS)), stamp))
    return events


GRACE = st.integers(0, 12)
EXTRA_RETENTION = st.one_of(st.just(0), st.integers(1, 15))
COMMITS = st.sampled_from([1, 5])


@pytest.mark.parametrize("emit", ["close", "update"])
@EXAMPLES
@given(events=event_lists(8), size=st.integers(1, 12), grace=GRACE, extra=EXTRA_RETENTION,
       commit_every=COMMITS)
def test_tumbling_windows_match_the_model(emit: str, events: list[Event], size: int,
                                          grace: int, extra: int, commit_every: int
                                          ) -> None:
    params = {"kind": "tumbling", "size": size, "grace": grace, "retention": grace + extra,
              "emit": emit}
    assert run_windows(params, events, commit_every) == fixed_model(
        events, size, size, grace, grace + extra, emit)


@pytest.mark.parametrize("emit", ["close", "update"])
@EXAMPLES
@given(events=event_lists(8), step=st.integers(1, 6), hops=st.integers(1, 4), grace=GRACE,
       extra=EXTRA_RETENTION, commit_every=COMMITS)
def test_hopping_windows_match_the_model(emit: str, events: list[Event], step: int,
                                         hops: int, grace: int, extra: int,
                                         commit_every: int) -> None:
    size = step * hops
    params = {"kind": "hopping", "size": size, "step": step, "grace": grace,
              "retention": grace + extra, "emit": emit}
    assert run_windows(params, events, commit_every) == fixed_model(
        events, size, step, grace, grace + extra, emit)


@pytest.mark.parametrize("emit", ["close", "update"])
@EXAMPLES
@given(events=event_lists(8), gap=st.integers(1, 10), grace=GRACE, extra=EXTRA_RETENTION,
       commit_every=COMMITS)
def test_sessions_match_the_model(emit: str, events: list[Event], gap: int, grace: int,
                                  extra: int, commit_every: int) -> None:
    params = {"kind": "sessions", "gap": gap, "grace": grace, "retention": grace + extra,
              "emit": emit}
    assert run_windows(params, events, commit_every) == sessions_model(
        events, gap, grace, grace + extra, emit)


# --- the rules, one example each ---------------------------------------------------------

TUMBLING = {"kind": "tumbling", "size": 10, "grace": 5, "retention": 5, "emit": "close"}


def _send(harness: JobHarness, offset: int, key: str, stamp: int) -> list[Output]:
    return harness.send(Record(key.encode(), b"", "input", 0, offset, stamp))


def test_a_window_closes_when_the_stream_time_reaches_end_plus_grace() -> None:
    with JobHarness(WindowJob, params=TUMBLING) as harness:
        assert _send(harness, 0, "a", 1) == []
        assert _send(harness, 1, "a", 12) == []          # [0, 10) takes records until 15
        assert _send(harness, 2, "b", 14) == []
        closed = _send(harness, 3, "b", 15)              # its timer fires before this one
        assert [(o.key, json.loads(o.value or b""), o.timestamp) for o in closed] == [
            (b"a", {"start": 0, "end": 10, "value": [0]}, 1)]
        assert harness.state == {b"a/w/0000000000000000010": [12, [1]],
                                 b"b/w/0000000000000000010": [15, [2, 3]]}


def test_a_late_record_is_dropped() -> None:
    outputs, held = run_windows(TUMBLING, [("a", 1), ("a", 15), ("a", 9), ("a", 30)])
    assert outputs == {"a": [({"start": 0, "end": 10, "value": [0]}, 1),
                             ({"start": 10, "end": 20, "value": [1]}, 15)]}
    assert held == {"a": [(Window(30, 40), [3])]}       # [0, 10) not opened again


def test_a_hopping_record_joins_only_its_windows_still_open() -> None:
    params = {"kind": "hopping", "size": 10, "step": 5, "grace": 0, "retention": 0,
              "emit": "update"}
    outputs, _ = run_windows(params, [("a", 12), ("a", 8)])
    assert outputs == {"a": [({"start": 5, "end": 15, "value": [0]}, 12),
                             ({"start": 10, "end": 20, "value": [0]}, 12),
                             ({"start": 5, "end": 15, "value": [0, 1]}, 12)]}


def test_sessions_merge_when_an_out_of_order_record_bridges_them() -> None:
    params = {"kind": "sessions", "gap": 10, "grace": 10, "retention": 10,
              "emit": "close"}
    events = [("a", 0), ("a", 18), ("a", 9), ("b", 100)]
    outputs, held = run_windows(params, events)
    assert outputs == {"a": [({"start": 0, "end": 18, "value": [0, 1, 2]}, 18)]}
    assert held == {"b": [(Window(100, 100), [3])]}


def test_a_session_takes_records_less_than_the_gap_apart() -> None:
    params = {"kind": "sessions", "gap": 10, "grace": 0, "retention": 0, "emit": "update"}
    outputs, _ = run_windows(params, [("a", 0), ("a", 9), ("a", 18), ("a", 28), ("a", 40)])
    assert [(value["start"], value["end"]) for value, _ in outputs["a"]] == [
        (0, 0), (0, 9), (0, 18), (28, 28), (40, 40)]


def test_retention_keeps_a_closed_window_readable_until_end_plus_retention() -> None:
    params = {**TUMBLING, "grace": 0, "retention": 20, "emit": "update"}
    with JobHarness(WindowJob, params=params) as harness:
        windows = _inner(harness.job).windows
        _send(harness, 0, "a", 1)
        _send(harness, 1, "a", 2)
        assert [o.key for o in _send(harness, 2, "b", 10)] == [b"b"]   # a's: closed
        assert windows.values(harness.store.state, b"a") == [(Window(0, 10), [0, 1])]
        _send(harness, 3, "b", 29)
        assert windows.values(harness.store.state, b"a") == [(Window(0, 10), [0, 1])]
        assert _send(harness, 4, "a", 5) == []           # closed, though still held
        _send(harness, 5, "b", 30)
        assert windows.values(harness.store.state, b"a") == []
        # b's [10, 20) to delete, [30, 40) to close, [20, 30) to delete
        assert [t[1] for t in harness.timers()] == [40, 40, 50]


def test_str_keys_name_str_entries() -> None:
    outputs: list[Output] = []
    with JobHarness(WindowJob, params=TUMBLING, key_format="str") as harness:
        outputs += _send(harness, 0, "alice", 3)
        assert harness.state == {"alice/w/0000000000000000000": [3, [0]]}
        assert _inner(harness.job).windows.values(harness.store.state, "alice") == [
            (Window(0, 10), [0])]
        outputs += _send(harness, 1, "bob", 40)
    assert [(o.key, json.loads(o.value or b"")) for o in outputs] == [
        (b"alice", {"start": 0, "end": 10, "value": [0]})]


def test_two_window_objects_and_the_jobs_own_timers_keep_apart() -> None:
    class Both(Job):
        def setup(self, context: Context) -> None:
            self.timers = context.timers
            self.minutes = Tumbling(context.timers, 10, name="m", add=_append, initial=NO_OFFSETS)
            self.visits = Sessions(context.timers, 3, name="v", add=_insert, merge=_union,
                                   initial=NO_OFFSETS)

        def process(self, record: Record, state: State) -> Iterator[Emitted]:
            self.timers.at(record.timestamp + 1, "own")
            yield from self.minutes.process(record, state)
            yield from self.visits.process(record, state)

        def on_timer(self, timer: Timer, state: State) -> Iterator[Emitted]:
            if timer.name == "own":
                yield timer.key, "own"
            yield from self.minutes.on_timer(timer, state)
            yield from self.visits.on_timer(timer, state)

    with JobHarness(Both) as harness:
        for offset, stamp in enumerate([1, 2, 20]):
            _send(harness, offset, "a", stamp)
    values = [o.value for o in harness.run.outputs]
    assert values == [b"own", b"own", b'{"start": 1, "end": 2, "value": [0, 1]}',
                      b'{"start": 0, "end": 10, "value": [0, 1]}']


def test_a_result_may_stamp_its_own_output() -> None:
    def result(key: bytes | str, window: Window, acc: list[int]) -> Emitted:
        return Output(key, str(len(acc)), timestamp=window.end, topic="counts")

    class Counted(Job):
        def setup(self, context: Context) -> None:
            self.windows = Tumbling(context.timers, 10, name="w", add=_append, initial=NO_OFFSETS,
                                    emit="update", result=result)

        def process(self, record: Record, state: State) -> list[Emitted]:
            return self.windows.process(record, state)

        def on_timer(self, timer: Timer, state: State) -> list[Emitted]:
            return self.windows.on_timer(timer, state)

    with JobHarness(Counted, outputs=["counts"]) as harness:
        out = _send(harness, 0, "a", 4)
    assert [(o.value, o.timestamp, o.topic) for o in out] == [(b"1", 10, "counts")]


def test_records_without_timestamp_are_ignored_and_keyless_ones_refused() -> None:
    with JobHarness(WindowJob, params=TUMBLING) as harness:
        assert _send(harness, 0, "a", -1) == []
        assert harness.state == {}
        with pytest.raises(ValueError, match="offset 1.*has none"):
            harness.send(Record(None, b"", "input", 0, 1, 5))


def test_a_job_that_does_not_run_its_timers_is_told() -> None:
    class Untimed(Job):
        def setup(self, context: Context) -> None:
            self.windows = Tumbling(context.timers, 10, name="w", add=_append, initial=NO_OFFSETS)

        def process(self, record: Record, state: State) -> list[Emitted]:
            return self.windows.process(record, state)

    with JobHarness(Untimed) as harness, pytest.raises(RuntimeError, match="on_timer"):
        _send(harness, 0, "a", 1)


@pytest.mark.parametrize(("make", "argument"), [
    (lambda: Tumbling(Timers(), 0, name="w", add=_append, initial=NO_OFFSETS), "size_ms"),
    (lambda: Tumbling(Timers(), 1.5, name="w", add=_append,  # type: ignore[arg-type]
                      initial=NO_OFFSETS), "size_ms"),
    (lambda: Hopping(Timers(), 10, 3, name="w", add=_append, initial=NO_OFFSETS), "step_ms"),
    (lambda: Hopping(Timers(), 10, 0, name="w", add=_append, initial=NO_OFFSETS), "step_ms"),
    (lambda: Tumbling(Timers(), 10, name="w", add=_append, initial=NO_OFFSETS, grace_ms=-1),
     "grace_ms"),
    (lambda: Tumbling(Timers(), 10, name="w", add=_append, initial=NO_OFFSETS, grace_ms=5,
                      retention_ms=4), "retention_ms"),
    (lambda: Tumbling(Timers(), 10, name="w", add=_append, initial=NO_OFFSETS,
                      emit="final"),  # type: ignore[arg-type]
     "emit"),
    (lambda: Tumbling(Timers(), 10, name="a/b", add=_append, initial=NO_OFFSETS), "name"),
    (lambda: Tumbling(Timers(), 10, name="", add=_append, initial=NO_OFFSETS), "name"),
    (lambda: Tumbling(Timers(), 10, name="w", add=_insert,  # type: ignore[arg-type]
                      initial={1, 2}), "initial"),
    (lambda: Sessions(Timers(), 0, name="w", add=_insert, merge=_union, initial=NO_OFFSETS),
     "gap_ms"),
    (lambda: Sessions(Timers(), 5, name="w", add=_insert, merge=None,  # type: ignore[arg-type]
                      initial=NO_OFFSETS),
     "merge"),
])
def test_invalid_arguments_are_named(make: Any, argument: str) -> None:
    with pytest.raises(ValueError, match=f"^{argument} "):
        make()
