"""What `baton autoscale` does next (pure): from the coordinator's status and what its
launcher started, one step.

Rules and theory of operation
=============================

The autoscaler acts on the coordinator's recommendation (`recommended_processors`,
orchestrator/core/autoscale.py) and on nothing else: the coordinator already measured,
stabilised and budgeted it. Each poll turns one `Situation` into one `Step`, checked in
this order, so the first that applies wins:

1. **Tidy.** A processor the launcher started that is gone (its process ended, or the
   coordinator holds it dead): forget it at the coordinator and stop it for good at the
   launcher (its unit, its pid file). A drained processor ends this way, and so does one
   that crashed: the count then falls and rule 6 replaces it if the demand needs it.
2. **Wait** while the picture is moving, because a step taken now would be sized on a
   count that is about to change: no recommendation yet; a drain in flight (a live
   processor marked draining); a processor the launcher started that has not
   registered yet; a handoff in flight (a scale-out's warmups, a split's children);
   the target assignment not reached.
3. **Scale out** by the difference when the target (the recommendation within
   `--min`/`--max`) is above the live, non-draining processors: new ids are the prefix
   and the lowest numbers no known processor and no started one has.
4. **Scale in** by the difference when the target is below, in one decision: the
   processors with the fewest active tasks (the least state to move), started ones
   before others, the newest first. They are drained together (their tasks move warm,
   as many at once as the coordinator's `max_warmups` lets), then rule 1 ends each.
   One decision a step in the load, as the recommendation's own: a scale-in from 3 to 1
   made as two drains would be two decisions, and the second would wait for the first.
5. **Expand** when every task has a processor, the recommendation says the demand
   needs more than the task count and `[autoscale] allow_expand` let it say so: each
   input grows to twice its partitions, then the tasks split (after which rule 3 can
   place processors on the new tasks).
6. Otherwise **hold**.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Bounds", "Expand", "Hold", "ScaleIn", "ScaleOut", "Situation", "Step", "Tidy",
           "Wait", "next_step"]



@dataclass(frozen=True)
class Bounds:
    """The processor counts the autoscaler keeps to: `[autoscale]` min/max, or the
    command's `--min`/`--max` (most 0: no bound beyond the recommendation's)."""

    least: int = 1
    most: int = 0

    def clamp(self, count: int) -> int:
        top = self.most or max(count, self.least)
        return max(self.least, min(count, top))


@dataclass(frozen=True)
class Situation:
    """What one poll knows.

    Attributes:
        status: the coordinator's `GET /status` (recommended_processors included).
        started: the processors the launcher started -> whether they still run (a
            launcher that cannot tell says True).
        bounds: the counts to keep to.
        prefix: the new processors' id prefix.
    """

    status: Mapping[str, Any]
    started: Mapping[str, bool]
    bounds: Bounds = Bounds()
    prefix: str = "auto-"


@dataclass(frozen=True)
class Wait:
    reason: str


@dataclass(frozen=True)
class Hold:
    reason: str


@dataclass(frozen=True)
class Tidy:
    """Forget these (when the coordinator still lists them) and stop them for good."""

    processors: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class ScaleOut:
    processors: tuple[str, ...]
    current: int
    target: int
    reason: str


@dataclass(frozen=True)
class ScaleIn:
    processors: tuple[str, ...]
    current: int
    target: int
    reason: str


@dataclass(frozen=True)
class Expand:
    """Grow each input topic to its new partition count, then split the tasks."""

    partitions: Mapping[str, int] = field(default_factory=dict)
    current: int = 0
    target: int = 0
    reason: str = ""


Step = Wait | Hold | Tidy | ScaleOut | ScaleIn | Expand


def next_step(s: Situation) -> Step:
    """The one step to take now (the module's rules, in order)."""
    procs = {p["id"]: p for p in s.status.get("processors", [])}
    gone = tuple(sorted(pid for pid, running in s.started.items()
                        if (pid in procs and not procs[pid]["alive"])
                        or (not running and not (pid in procs and procs[pid]["alive"]))))
    if gone:
        return Tidy(gone, f"{', '.join(gone)} stopped (drained, or gone)")
    waiting = _in_flight(s, procs)
    if waiting is not None:
        return Wait(waiting)
    live = [p for p in procs.values() if p["alive"] and not p.get("draining")]
    current, recommended = len(live), int(s.status["recommended_processors"])
    target = s.bounds.clamp(recommended)
    why = _why(s.status, recommended, target)
    if target > current:
        return ScaleOut(_new_ids(s, procs, target - current), current, target, why)
    if target < current:
        return ScaleIn(_least_loaded(live, s.started, current - target), current, target,
                       why)
    grow = _expansion(s, current)
    if grow:
        return Expand(grow, current, current, "the demand needs more processors than the "
                      "job has tasks: expand the inputs and split the tasks")
    return Hold(why)


def _in_flight(s: Situation, procs: Mapping[str, Mapping[str, Any]]) -> str | None:
    status = s.status
    if status.get("recommended_processors") is None:
        return "the coordinator has no recommendation yet (it samples about once a second)"
    draining = sorted(pid for pid, p in procs.items() if p["alive"] and p.get("draining"))
    if draining:
        return f"the drain of {', '.join(draining)} is in flight"
    unregistered = sorted(pid for pid in s.started
                          if not (pid in procs and procs[pid]["alive"]))
    if unregistered:
        return f"{', '.join(unregistered)} (started) not live: registering, or stopping"
    handoffs = status.get("handoffs") or []
    if handoffs:
        return f"{len(handoffs)} handoff(s) in flight ({handoffs[0]['task']} first)"
    if not status.get("balanced"):
        return "the target assignment is not reached yet"
    return None


def _why(status: Mapping[str, Any], recommended: int, target: int) -> str:
    reason = str((status.get("autoscale") or {}).get("reason", ""))
    if target != recommended:
        reason += f"; the recommendation ({recommended}) bounded to {target}"
    return reason


def _new_ids(s: Situation, procs: Mapping[str, Any], count: int) -> tuple[str, ...]:
    taken = set(procs) | set(s.started)
    out: list[str] = []
    n = 0
    while len(out) < count:
        n += 1
        pid = f"{s.prefix}{n}"
        if pid not in taken:
            out.append(pid)
    return tuple(out)


def _least_loaded(live: Sequence[Mapping[str, Any]], started: Mapping[str, bool],
                  count: int) -> tuple[str, ...]:
    """The `count` with the fewest active tasks; among those ones the launcher started;
    the newest first."""
    def key(p: Mapping[str, Any]) -> tuple[int, bool, int, str]:
        tail = re.search(r"(\d+)$", p["id"])
        return (len(p["active"]), p["id"] not in started,
                -int(tail.group(1)) if tail else 0, p["id"])
    return tuple(str(p["id"]) for p in sorted(live, key=key)[:count])


def _expansion(s: Situation, current: int) -> dict[str, int]:
    autoscale = s.status.get("autoscale") or {}
    tasks = len(s.status.get("tasks", []))
    if not autoscale.get("expand") or current < tasks:
        return {}
    if s.bounds.most and tasks >= s.bounds.most:
        return {}
    counts: dict[str, int] = {}
    for task in s.status.get("tasks", []):
        for partition in task["partitions"]:
            topic, _, number = partition.rpartition(":")
            counts[topic] = max(counts.get(topic, 0), int(number) + 1)
    return {topic: count * 2 for topic, count in sorted(counts.items())}
