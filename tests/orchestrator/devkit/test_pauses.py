"""The demo's per-handoff pauses: each handoff's kind, and its largest output gap."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.devkit.pauses import (
    Watch,
    handoff_kind,
    handoff_outcome,
    handoff_pauses,
    pause_gaps,
    percentile,
)

STATUS: dict[str, Any] = {
    "tasks": [{"name": "Partition 0", "partitions": ["events:0"]},
              {"name": "Partition 4", "partitions": ["events:4"], "split_from": "Partition 0"}],
    "draining": ["p1"],
}


class _Msg:
    """What the pause reader asks of a record: its key, partition and timestamp."""

    def __init__(self, key: bytes, partition: int, wall_s: float = 0.0) -> None:
        self._key, self._partition, self._ms = key, partition, int(wall_s * 1000)

    def key(self) -> bytes:
        return self._key

    def topic(self) -> str:
        return "events"

    def partition(self) -> int:
        return self._partition

    def timestamp(self) -> tuple[int, int]:
        return 1, self._ms


def test_a_split_childs_move_is_a_split_even_from_a_draining_processor() -> None:
    assert handoff_kind({"task": "Partition 4", "from": "p1"}, STATUS) == "split"


def test_a_move_away_from_a_draining_processor_is_a_drain() -> None:
    assert handoff_kind({"task": "Partition 0", "from": "p1"}, STATUS) == "drain"


def test_any_other_move_is_a_move() -> None:
    assert handoff_kind({"task": "Partition 0", "from": "p2"}, STATUS) == "move"
    assert handoff_kind({"task": "Partition 0", "from": None}, {"tasks": []}) == "move"


def _watch(task: str, kind: Any, wall_from: float, wall_to: float) -> Watch:
    offset = time.time() - time.monotonic()
    return Watch(task, wall_from - offset, wall_to - offset, "p2", "p3", kind,
                 caught_up_at=wall_from - offset)


def test_the_pause_is_the_largest_gap_of_the_tasks_keys_inside_its_window() -> None:
    now = time.time()
    inputs = [_Msg(b"a", 0), _Msg(b"b", 1)]
    # task 0's key: outputs 0.1 s apart, then a 0.4 s gap, all inside the window; task 1's
    # key has a larger gap, which is not task 0's pause
    outputs = [_Msg(b"a", 0, now + t) for t in (0.0, 0.1, 0.2, 0.6, 0.7)]
    outputs += [_Msg(b"b", 0, now + t) for t in (0.0, 0.9)]
    watches = [_watch("Partition 0", "move", now, now + 0.7),
               _watch("Partition 1", "drain", now + 5, now + 6)]    # no outputs then
    tasks = {"Partition 0": ["events:0"], "Partition 1": ["events:1"]}
    gaps = pause_gaps(watches, inputs, outputs, tasks)
    assert [(g.task, round(g.ms)) for g in gaps] == [("Partition 0", 400)]
    listed = handoff_pauses(watches, gaps)
    assert [(h["task"], h["kind"], h["from"], h["to"], h["outcome"], h["pause_ms"])
            for h in listed] == [("Partition 0", "move", "p2", "p3", "done", 400.0),
                                 ("Partition 1", "drain", "p2", "p3", "done", None)]
    assert listed[0]["at"] is not None and listed[1]["at"] is None


def test_a_move_the_assignor_withdrew_before_its_release_has_no_pause() -> None:
    now = time.time()
    inputs = [_Msg(b"a", 0)]
    outputs = [_Msg(b"a", 0, now + t) for t in (0.0, 0.5, 0.6)]
    watch = _watch("Partition 0", "move", now, now + 0.6)
    watch.outcome = "cancelled"
    gaps = pause_gaps([watch], inputs, outputs, {"Partition 0": ["events:0"]})
    assert gaps == []
    assert handoff_pauses([watch], gaps)[0]["pause_ms"] is None


def _ended(phase: str, reason: str, to: str = "p3") -> dict[str, Any]:
    return {"recent_handoffs": [{"task": "Partition 0", "from": "p2", "to": to,
                                 "phase": phase, "reason": reason}]}


def test_how_a_handoff_ended_comes_from_the_coordinators_recent_handoffs() -> None:
    watch = Watch("Partition 0", 0.0, 1.0, "p2", "p3")
    assert handoff_outcome(watch, _ended("done", "")) == "done"
    assert handoff_outcome(watch, _ended(
        "cancelled", "cancelled: the assignor now wants it on p4")) == "cancelled"
    for after_release in ("cancelled during the release (x); p2 resumes",
                          "target p3 was lost while activating"):
        assert handoff_outcome(watch, _ended("cancelled", after_release)) == "failed"
    # another move of the task, or one no longer listed: taken as done
    assert handoff_outcome(watch, _ended("cancelled", "cancelled: x", to="p5")) == "done"
    assert handoff_outcome(watch, {}) == "done"


def test_percentiles() -> None:
    assert percentile([], 99) == 0.0
    assert percentile([7.0], 50) == 7.0
    assert percentile([float(v) for v in range(1, 102)], 50) == 51.0
