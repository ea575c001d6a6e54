"""When the active tasks' wall-clock timers are looked at (processor/timers.py).

A task whose job sets wall-clock timers is looked at once per `LOOK_S` of the loop: one
seek into its store finds the earliest timer, and those due fire inside the task's
transaction (`ActiveTask.fire_timers`), committed with the round's commits. So a timer
fires within `LOOK_S` and a commit of its time, on the active owner only: replays never
look.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from orchestrator.wire.clock import Clock
from processor.active import ActiveTask
from processor.timed_job import TimedJob

__all__ = ["LOOK_S", "WallTimers"]

# how often a task's earliest wall-clock timer is looked up
LOOK_S = 0.1


class WallTimers:
    """Looks at each active task's wall-clock timers every `LOOK_S`."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._looked: dict[str, float] = {}

    def turn(self, active: Mapping[str, ActiveTask],
             run: Callable[[str, Callable[[ActiveTask], object]], None]) -> None:
        """Fire what is due on each active task (`run`: the round's step runner, which
        owns what a step raises)."""
        now = self._clock.monotonic()
        for name in [n for n in self._looked if n not in active]:
            del self._looked[name]
        for name, task in active.items():
            job = task.job
            if not isinstance(job, TimedJob) or not job.timers.wall:
                continue
            if now - self._looked.get(name, -LOOK_S) < LOOK_S:
                continue
            self._looked[name] = now
            now_ms = int(self._clock.time() * 1000)
            run(name, functools.partial(ActiveTask.fire_timers, now_ms=now_ms))
