"""When and how the active tasks commit: every `commit_interval_ms`, side by side, and a
newly active task's first transaction at once.

A task that has just gone active (a handoff's new owner) commits its first batch without
waiting for the next interval: until that commit its output is invisible to
read_committed readers, so the wait would sit inside the handoff pause (up to a whole
interval, half of one on average).

A commit is a few broker round trips (flush, offsets, end of transaction) waited out
with the GIL released: one after the other, four tasks' commits held the round, and so
a release, for 50-280 ms. So the open transactions commit on `_COMMIT_THREADS` threads
while the main loop waits; a task's failure is still handled on the main loop, as for a
commit of its own, and so are the job's after_commit effects (processor/effects.py),
run once their commit is known.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from metrics import ProcessorMetrics
from orchestrator.wire.clock import Clock
from processor.active import ActiveTask
from processor.handoff_steps import step_ms

__all__ = ["Commits"]

log = logging.getLogger("baton.processor.runtime")

_COMMIT_THREADS = 4

# runs a step on an active task, handling what the step raises (the task runtime's)
RunActive = Callable[[str, Callable[[ActiveTask], None]], None]


class Commits:
    """The active tasks' commits.

    Args:
        interval_s: processor.commit_interval_ms in seconds.
        metrics: counts records processed, transactions, the first output's pause.
        clock: times the interval.
    """

    def __init__(self, interval_s: float, metrics: ProcessorMetrics, clock: Clock) -> None:
        self._every_s = interval_s
        self._metrics = metrics
        self._clock = clock
        self._committed_at = float("-inf")
        self._pool = ThreadPoolExecutor(max_workers=_COMMIT_THREADS,
                                        thread_name_prefix="baton-commit")

    def due(self, round_s: float) -> bool:
        """The interval has passed since the last commit, or a round is that long."""
        return (round_s >= self._every_s
                or self._clock.monotonic() - self._committed_at >= self._every_s)

    def commit_all(self, active: Mapping[str, ActiveTask], run: RunActive) -> None:
        """Commit every active task's open transaction, each through `run`."""
        self._committed_at = self._clock.monotonic()
        self._commit([task for task, a in active.items() if a.in_transaction], active, run)

    def commit_first(self, active: Mapping[str, ActiveTask], run: RunActive) -> None:
        """Between intervals: commit the open transactions of the tasks that have not
        committed output since they went active (see the module doc)."""
        self._commit([task for task, a in active.items() if a.in_transaction
                      and a.activated_at is not None and a.pause_ms is None], active, run)

    def _commit(self, open_: list[str], active: Mapping[str, ActiveTask], run: RunActive
                ) -> None:
        if len(open_) < 2:
            for task in open_:
                run(task, self.commit)
            return
        done = {task: self._pool.submit(_counted_commit, active[task]) for task in open_}
        for task, outcome in done.items():
            run(task, functools.partial(self.commit, outcome=outcome))

    def commit(self, active: ActiveTask,
               outcome: Future[tuple[bool, int]] | None = None) -> None:
        """Commit `active` (or take the result of its commit on a thread, `outcome`) and
        count it."""
        had_pause, count = outcome.result() if outcome is not None else _counted_commit(active)
        active.run_effects()
        first = not had_pause and active.pause_ms is not None
        steps = step_ms(active.stamps) if first else {}
        if first:
            log.info("task %r: first output committed %.0f ms after activation began (%s)",
                     active.name, active.pause_ms,
                     ", ".join(f"{step} {ms:.0f} ms" for step, ms in steps.items()))
        if not count:
            return
        self._metrics.record_processed(active.name, count)
        self._metrics.record_transaction(active.name, "committed")
        if first and active.pause_ms is not None:
            self._metrics.record_handoff_step("activating", active.pause_ms / 1000)
            for step, ms in steps.items():
                self._metrics.record_handoff_step(step, ms / 1000)  # type: ignore[arg-type]

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _counted_commit(active: ActiveTask) -> tuple[bool, int]:
    """Whether the task had committed output before, and its commit's record count."""
    had_pause = active.pause_ms is not None
    return had_pause, active.commit()
