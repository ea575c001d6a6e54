"""When and how the active tasks commit: every `commit_interval_ms`, side by side, and a
newly active task's first transaction at once.

A task that has just gone active (a handoff's new owner) commits its first batch without
waiting for the next interval: until that commit its output is invisible to
read_committed readers, so the wait would sit inside the handoff pause (up to a whole
interval, half of one on average).

A commit is a few broker round trips (flush, offsets, end of transaction) waited out
with the GIL released: one after the other, several tasks' commits would hold the round,
and so a release. So the open transactions commit on `_COMMIT_THREADS` threads while
the main loop waits; a task's failure is still handled on the main loop, as for a
commit of its own, and so are the job's after_commit effects (processor/effects.py),
run once their commit is known.

The loop waits for a commit at most `processor.commit_timeout_ms`. librdkafka's
`send_offsets_to_transaction` can block past its own timeout while the group's
coordinator is lost (librdkafka issues 5456 and 5511), and a loop that waited on it
would hold every task of the processor until its stall watch ended the process. A
commit past the timeout is given up (`TaskTransaction.abandon`) and ends `failed`
(`CommitHung`): the task starts again with a new producer, whose fence ends the stuck
transaction, and the stuck thread is left to the old pool while the commits go on on a new one. The
pool's threads are daemon threads: a stuck one must not hold the processor's exit,
which a `concurrent.futures` pool's would (the interpreter joins them).
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from metrics import ProcessorMetrics
from orchestrator.wire.clock import Clock
from processor.active import ActiveTask
from processor.handoff_steps import step_ms
from processor.task_transaction import CommitResult, Outcome
from processor.transaction import CommitHung

__all__ = ["Commits"]

T = TypeVar("T")

log = logging.getLogger("baton.processor.runtime")

_COMMIT_THREADS = 4

# runs a step on an active task, handling what it raises or the commit it returns (the
# active round's `run`)
RunActive = Callable[[str, Callable[[ActiveTask], object]], None]


class Commits:
    """The active tasks' commits.

    Args:
        interval_s: processor.commit_interval_ms in seconds.
        metrics: counts records processed, transactions, the first output's pause.
        clock: times the interval.
        timeout_s: processor.commit_timeout_ms in seconds (the module doc).
    """

    def __init__(self, interval_s: float, metrics: ProcessorMetrics, clock: Clock,
                 timeout_s: float = 30.0) -> None:
        self._every_s = interval_s
        self._metrics = metrics
        self._clock = clock
        self._timeout_s = timeout_s
        self._committed_at = float("-inf")
        self._pool = _Pool(_COMMIT_THREADS)

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
        deadline = self._clock.monotonic() + self._timeout_s
        done = {task: self._pool.submit(_counted_commit, active[task]) for task in open_}
        for task, outcome in done.items():
            run(task, functools.partial(self.commit, outcome=(outcome, deadline)))

    def commit(self, active: ActiveTask,
               outcome: tuple[Future[tuple[bool, CommitResult]], float] | None = None
               ) -> CommitResult:
        """Commit `active` (or take the result of its commit on a thread, `outcome`: its
        future and the loop's deadline for it), count it, and return how it ended: a
        commit that did not return in time ended `failed` (`CommitHung`, the module doc).
        """
        if outcome is None:
            outcome = (self._pool.submit(_counted_commit, active),
                       self._clock.monotonic() + self._timeout_s)
        had_pause, result = self._within(active, *outcome)
        if not result.committed:
            return result
        count = result.records
        active.run_effects()
        first = not had_pause and active.pause_ms is not None
        steps = step_ms(active.stamps) if first else {}
        if first:
            log.info("task %r: first output committed %.0f ms after activation began (%s)",
                     active.name, active.pause_ms,
                     ", ".join(f"{step} {ms:.0f} ms" for step, ms in steps.items()))
        if not count:
            return result
        self._metrics.record_processed(active.name, count)
        self._metrics.record_transaction(active.name, "committed")
        if first and active.pause_ms is not None:
            self._metrics.record_handoff_step("activating", active.pause_ms / 1000)
            for step, ms in steps.items():
                self._metrics.record_handoff_step(step, ms / 1000)  # type: ignore[arg-type]
        return result

    def final(self, active: ActiveTask) -> CommitResult:
        """A release's last commit, within the same timeout."""
        return self._within(active, self._pool.submit(_counted_commit, active),
                            self._clock.monotonic() + self._timeout_s)[1]

    def _within(self, active: ActiveTask, outcome: Future[tuple[bool, CommitResult]],
                deadline: float) -> tuple[bool, CommitResult]:
        try:
            return outcome.result(timeout=max(0.0, deadline - self._clock.monotonic()))
        except FutureTimeout:
            active.transaction.abandon()
            stuck, self._pool = self._pool, _Pool(_COMMIT_THREADS)
            stuck.shutdown(wait=False)      # its thread ends when the call returns
            return True, CommitResult(Outcome.FAILED, error=CommitHung(
                f"task {active.name!r}: its commit did not return within "
                f"{self._timeout_s:.0f} s (processor.commit_timeout_ms); the task starts "
                "again with a new producer, which fences the stuck one"))

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class _Pool:
    """`threads` daemon threads running what is submitted, each with its future."""

    def __init__(self, threads: int) -> None:
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = \
            queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._serve, name="baton-commit",
                                          daemon=True) for _ in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, call: Callable[[ActiveTask], T], active: ActiveTask) -> Future[T]:
        future: Future[T] = Future()
        self._work.put((future, functools.partial(call, active)))
        return future

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            future, call = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as exc:    # handed to the loop with the result
                    future.set_exception(exc)

    def shutdown(self, wait: bool) -> None:
        """Stop the threads once the work queued before is done; `wait`: join them."""
        for _ in self._threads:
            self._work.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


def _counted_commit(active: ActiveTask) -> tuple[bool, CommitResult]:
    """Whether the task had committed output before, and how its commit ended."""
    had_pause = active.pause_ms is not None
    return had_pause, active.commit()
