"""Task failures: what the coordinator core does when a processor reports a task
`failed` (pure bookkeeping on the injected clock's readings, no I/O).

Theory of operation
===================

A processor marks a task `failed` with its error when the task's store cannot be
opened, its activation fails, or `process()` raises under `on_error = "fail"`; it frees
what the task held and does not start it again until the coordinator stops listing it.
Each reconcile step, before the handoffs are driven, `observe()` acts on every fresh
failed report of a task the processor is listed with (or is moving to it):

1. It counts one attempt for (task, processor), keeps the error, and excludes that
   processor for that task for a backoff that doubles with every attempt
   (`backoff_s * 2 ** (attempts - 1)`).
2. A handoff whose *target* failed gets `ReplicaFailed` (cancelled before activation,
   abandoned during it: the source resumes); one whose *source* failed before
   activation is cancelled, so the task is placed as any ownerless task.
3. The task leaves the processor's listing, so it stops reporting it (and could take it
   again later). A failed *active* task thereby becomes ownerless and placement puts it
   elsewhere at once; a failed replica's task stays with its owner.
4. The report is consumed: only the processor's next heartbeat can count again.

The assignor is told each processor's `blocked()` tasks (`ProcessorSnapshot.excluded`),
so a newcomer that failed one warmup is given another task and the scale-out goes on.
`steer()` is the backstop for what the assignor still places on a blocked processor: a
blocked warmup or move target is dropped (the task stays where it is), a blocked home
of an ownerless task becomes the least-loaded allowed processor.
A (task, processor) pair that failed `max_attempts` times is excluded for good, so a
poison job cannot loop forever; once every live candidate is exhausted the task stays
failed (ownerless), and status, `pending()` and the `baton_tasks_failed` gauge say so.
A pair that has not failed again for `FORGET_AFTER` backoffs past its exclusion (ten
minutes at the default backoff) is forgotten, unless its exclusion is for good: a
poison record fails every retry within the backoffs, while failures that come now and
then over a long run never add up to the bound. (A broker away for longer than
`transaction.timeout.ms` is one: at its return it aborts the transactions left open and
fences their producers, and each such task is reported failed.) A new execution of a
processor (an operator restarted it, perhaps with a fix) gets a clean slate. The counts
and errors are persisted (key "failures"); a restarted coordinator re-arms each
exclusion for a full backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from orchestrator.core import handoff as hs
from orchestrator.core.handoff_driver import HandoffBook
from orchestrator.core.liveness import Liveness
from orchestrator.core.roles import RoleBook

__all__ = ["DEFAULT_BACKOFF_S", "DEFAULT_MAX_ATTEMPTS", "FORGET_AFTER", "Failure", "Failures",
           "FailureView"]

log = logging.getLogger("baton.coordinator")

# First exclusion of a processor for a task it failed: long enough for a transient
# cause (a store lock still held by a dying execution, a broker hiccup) to clear,
# short enough that a single processor job retries within a minute.
DEFAULT_BACKOFF_S: Final = 30.0
# Attempts per (task, processor) before that processor is excluded for the task for
# good: a deterministic failure (a poison record) shows by the third.
DEFAULT_MAX_ATTEMPTS: Final = 3
# A pair's failures are forgotten this many backoffs after its exclusion ended with no
# new one: far longer than a poison task takes to fail its retries.
FORGET_AFTER: Final = 20
_BEFORE_ACTIVATION: Final = (hs.Phase.PLANNED, hs.Phase.CATCHING_UP, hs.Phase.RELEASING)


@dataclass
class Failure:
    """One (task, processor) pair's failures: how many, the last error, the exclusion."""

    attempts: int
    error: str
    excluded_until: float


class FailureView(Protocol):
    """What failure handling reads and edits of the coordinator core."""

    processors: Liveness
    roles: RoleBook
    handoff_book: HandoffBook


class Failures:
    """Failures by task and processor; see the module docstring.

    Args:
        backoff_s: the first exclusion, in seconds; doubled with every attempt.
        max_attempts: attempts per (task, processor) before it is excluded for good.
    """

    def __init__(self, backoff_s: float = DEFAULT_BACKOFF_S,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self.backoff_s, self.max_attempts = backoff_s, max_attempts
        self.by_task: dict[str, dict[str, Failure]] = {}

    def observe(self, core: FailureView, now: float) -> None:
        """Forget the pairs quiet long enough, then act on every fresh failed report (see
        the module docstring)."""
        self._forget_quiet(now)
        for processor in core.processors.live():
            for task, report in list(processor.reports.items()):
                if report.role == "failed" and _involved(core, processor.id, task):
                    del processor.reports[task]
                    self._act(core, processor.id, task, report.error or "no error given", now)

    def _act(self, core: FailureView, pid: str, task: str, error: str, now: float) -> None:
        failure = self.by_task.setdefault(task, {}).get(pid) or Failure(0, error, now)
        failure.attempts += 1
        failure.error = error
        failure.excluded_until = now + self.backoff_s * 2 ** (failure.attempts - 1)
        self.by_task[task][pid] = failure
        final = failure.attempts >= self.max_attempts
        log.error("task %r failed on %s (attempt %d of %d): %s; %s", task, pid,
                  failure.attempts, self.max_attempts, error,
                  f"{pid} will not run it again" if final else
                  f"{pid} is excluded for it until {failure.excluded_until - now:.0f} s from now")
        handoff = core.handoff_book.handoffs.get(task)
        core.roles.get(pid).discard(task)   # first: a resumed source is the only one listed
        if handoff is not None and handoff.target == pid:
            core.handoff_book.step(handoff, hs.ReplicaFailed(error, pid))
        elif handoff is not None and handoff.source == pid \
                and handoff.phase in _BEFORE_ACTIVATION:
            core.handoff_book.step(handoff, hs.Cancel(f"source {pid} failed the task: {error}"))
            core.roles.get(pid).discard(task)   # the cancel resumed it: it cannot run it

    def allowed(self, task: str, pid: str, now: float) -> bool:
        """May `pid` be given `task` (in any role) now?"""
        failure = self.by_task.get(task, {}).get(pid)
        return failure is None or (failure.attempts < self.max_attempts
                                   and now >= failure.excluded_until)

    def blocked(self, pid: str, now: float) -> set[str]:
        """The tasks `pid` may not be given now."""
        return {t for t in self.by_task if not self.allowed(t, pid, now)}

    def steer(self, task: str, owner: str | None, home: str | None, warm: str | None,
              load: Mapping[str, int], now: float) -> tuple[str | None, str | None]:
        """The assignor's home and warmup target for `task`, minus blocked processors.

        Args:
            task: the task.
            owner: its live owner, if any.
            home: where the assignor wants it active.
            warm: where the assignor wants it warmed up.
            load: the candidate processors and the active tasks each is listed with.
            now: the clock reading.

        Returns:
            (home, warm): a blocked target is dropped; a blocked home of an ownerless
            task becomes the least-loaded allowed candidate (None when none is).
        """
        if warm is not None and not self.allowed(task, warm, now):
            warm = None
        if home is not None and not self.allowed(task, home, now):
            allowed = sorted((n, pid) for pid, n in load.items()
                             if self.allowed(task, pid, now))
            home = allowed[0][1] if owner is None and allowed else None
        return home, warm

    def exhausted(self, task: str, candidates: Iterable[str]) -> bool:
        """Every candidate (at least one) failed `task` `max_attempts` times."""
        failures = self.by_task.get(task, {})
        pids = list(candidates)
        return bool(pids) and all(
            p in failures and failures[p].attempts >= self.max_attempts for p in pids)

    def _forget_quiet(self, now: float) -> None:
        quiet = FORGET_AFTER * self.backoff_s
        for task, by_pid in list(self.by_task.items()):
            for pid, f in list(by_pid.items()):
                if f.attempts < self.max_attempts and now >= f.excluded_until + quiet:
                    del by_pid[pid]
            if not by_pid:
                del self.by_task[task]

    def forget_processor(self, pid: str) -> None:
        """A new execution of `pid`: its past failures no longer count."""
        for task in list(self.by_task):
            self.by_task[task].pop(pid, None)
            if not self.by_task[task]:
                del self.by_task[task]

    def describe(self, task: str, now: float) -> list[dict[str, Any]]:
        """`task`'s failures for status: processor, error, attempts, retry in (s)."""
        return [{"processor": pid, "error": f.error, "attempts": f.attempts,
                 "exhausted": f.attempts >= self.max_attempts,
                 "retry_in_s": None if f.attempts >= self.max_attempts
                 else round(max(0.0, f.excluded_until - now), 3)}
                for pid, f in sorted(self.by_task.get(task, {}).items())]

    def to_record(self) -> dict[str, Any]:
        return {task: {pid: {"attempts": f.attempts, "error": f.error}
                       for pid, f in sorted(by_pid.items())}
                for task, by_pid in sorted(self.by_task.items())}

    def load(self, record: Mapping[str, Any], now: float) -> None:
        """Read `to_record()`'s output; every exclusion is re-armed from `now`."""
        for task, by_pid in record.items():
            for pid, f in dict(by_pid).items():
                attempts = int(f.get("attempts", 1))
                self.by_task.setdefault(task, {})[pid] = Failure(
                    attempts, str(f.get("error", "")),
                    now + self.backoff_s * 2 ** (attempts - 1))


def _involved(core: FailureView, pid: str, task: str) -> bool:
    """`pid` is listed with `task`, or one side of its handoff."""
    handoff = core.handoff_book.handoffs.get(task)
    roles = core.roles.peek(pid)
    return (task in roles.active or task in roles.warmup or task in roles.standby
            or (handoff is not None and pid in (handoff.source, handoff.target)))
