"""Where each handoff's pause went, read from the daemons' own logs (the demo and
bench/handoff_pause.py report it beside the pause).

Each daemon stamps its lines with its own clock; on one host those clocks agree to the
millisecond. Per handoff (task, old owner -> new owner):

- `release_told`: the coordinator decides the release -> the old owner's ack reaches
  it, less the old owner's `release` (the coordinator's clock: the round trips);
- `release`: the old owner takes the release -> its final commit done (its clock);
- `activate_told`: the ack reaches the coordinator -> the new owner begins its
  activation (both clocks);
- `fence`, `t1`, `replay`, `first_read`, `first_commit`: the new owner's steps
  (processor/handoff_steps.py, its clock).

The lines read: the coordinator's "task 'T' handoff A -> B: ... -> releasing",
"releasing -> activating"; the old owner's "task 'T': released at ... (release N ms)";
the new owner's "task 'T': first output committed N ms after activation began (fence
.. ms, ...)".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from orchestrator.devkit.pauses import percentile

__all__ = ["PHASES", "HandoffPhases", "phase_summary", "read_phases"]

PHASES = ("release_told", "release", "activate_told", "fence", "t1", "replay", "first_read",
          "first_commit")

_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "
_DECIDED = re.compile(_STAMP + r".*task '(.+)' handoff (\S+) -> (\S+): \w+ -> releasing$")
_ACKED = re.compile(_STAMP + r".*task '(.+)' handoff (\S+) -> (\S+): releasing -> activating$")
_RELEASED = re.compile(_STAMP + r".*task '(.+)': released at .* \(release (\d+) ms\)$")
_FIRST = re.compile(_STAMP + r".*task '(.+)': first output committed (\d+) ms after "
                    r"activation began \((.*)\)$")
_STEP = re.compile(r"(\w+) (\d+) ms")


@dataclass
class HandoffPhases:
    """One handoff's phases in milliseconds (a phase whose lines were not found is left
    out)."""

    task: str
    source: str
    target: str
    decided: float
    ms: dict[str, float] = field(default_factory=dict)


def _time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _lines(path: Path, pattern: re.Pattern[str]) -> list[re.Match[str]]:
    if not path.exists():
        return []
    return [m for line in path.read_text(errors="replace").splitlines()
            if (m := pattern.match(line)) is not None]


def read_phases(coordinator_log: Path, processor_logs: Mapping[str, Path]
                ) -> list[HandoffPhases]:
    """Every handoff the coordinator's log shows released, with its phases."""
    acked = [(m[2], m[3], m[4], _time(m[1])) for m in _lines(coordinator_log, _ACKED)]
    released = {pid: [(m[2], _time(m[1]), float(m[3])) for m in _lines(path, _RELEASED)]
                for pid, path in processor_logs.items()}
    first = {pid: [(m[2], _time(m[1]), float(m[3]), m[4]) for m in _lines(path, _FIRST)]
             for pid, path in processor_logs.items()}
    out: list[HandoffPhases] = []
    for m in _lines(coordinator_log, _DECIDED):
        task, source, target, decided = m[2], m[3], m[4], _time(m[1])
        ack = next((t for k, s, d, t in acked
                    if (k, s, d) == (task, source, target) and t >= decided), None)
        if ack is None:
            continue
        phases = HandoffPhases(task, source, target, decided)
        release = next((ms for k, t, ms in released.get(source, [])
                        if k == task and decided <= t <= ack), None)
        if release is not None:
            phases.ms["release"] = release
            phases.ms["release_told"] = max(0.0, round((ack - decided) * 1000 - release, 1))
        began = next(((t, pause, steps) for k, t, pause, steps in first.get(target, [])
                      if k == task and t >= ack), None)
        if began is not None:
            at, pause, steps = began
            phases.ms["activate_told"] = max(0.0, round((at - pause / 1000 - ack) * 1000, 1))
            phases.ms.update({name: float(ms) for name, ms in _STEP.findall(steps)})
        out.append(phases)
    return out


def phase_summary(handoffs: Sequence[HandoffPhases]) -> dict[str, dict[str, float]]:
    """Each phase's median and p99 in ms over the handoffs, and how many showed it."""
    out: dict[str, dict[str, float]] = {}
    for phase in PHASES:
        values = [h.ms[phase] for h in handoffs if phase in h.ms]
        if values:
            out[phase] = {"p50": round(percentile(values, 50), 1),
                          "p99": round(percentile(values, 99), 1), "n": len(values)}
    return out
