"""A round's active batch: every active task here processes its share of one consume().

Each step on an active task (processing a batch, committing) runs through `run`, which
hands what a step raised to the task's lifecycle (processor/lifecycle.py): an aborted
transaction rewinds the task to T1 and it goes on; a fatal producer error restarts it
(fence again, replay, carry on); a fence, a failure or a store error stops it, reported
`failed`.

A round takes at most what the job processes in a tenth of a second at its recent cost
(processor/runtime/batch_size.py), so a slow job does not hold the loop for seconds.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping

from orchestrator.wire.clock import Clock
from processor.active import ActiveTask
from processor.lifecycle import Event
from processor.runtime.active_consumer import ActiveConsumer
from processor.runtime.batch_size import BatchSize
from processor.runtime.batches import by_task
from processor.runtime.children import SplitChildren
from processor.runtime.commits import Commits
from processor.runtime.consumers import log_error
from processor.runtime.outcomes import ROUND_ERRORS, event_of, event_of_commit
from processor.runtime.replay_round import BATCH
from processor.runtime.wall_timers import WallTimers
from processor.task_transaction import CommitResult

__all__ = ["ActiveRound"]

log = logging.getLogger("baton.processor.runtime")


class ActiveRound:
    """Runs the active tasks' batches and commits.

    Args:
        active: the runtime's active tasks (the live map).
        consumer: the active consumer.
        children: the split children embedded in their parents (pruned each round).
        commits: when and how the tasks commit.
        happened: the task's lifecycle, told what a step raised (with the reason).
    """

    def __init__(self, active: Mapping[str, ActiveTask], consumer: ActiveConsumer,
                 children: SplitChildren, commits: Commits,
                 happened: Callable[[str, Event, str], None], clock: Clock) -> None:
        self._active = active
        self._clock = clock
        self.size = BatchSize(BATCH)
        self.share = 0      # the last round's records, counted against a full batch
        self._consumer = consumer
        self._children = children
        self._commits = commits
        self._happened = happened
        self._timers = WallTimers(clock)

    def poll(self, timeout: float, commit: bool = True) -> int:
        """Process one batch (its size: `size`); with `commit`, commit every open
        transaction after it (without, only a newly active task's first one).
        Returns the records read; `share` says how much of a full batch's time that was."""
        self._consumer.release_barriers(self._active)
        self._children.prune(self._active)
        bite = self.size.bite()
        messages = self._consumer.poll(bite, timeout, self._active)
        began = self._clock.monotonic()
        for task, records in by_task(messages, self._consumer.owner.get, log_error).items():
            self.run(task, functools.partial(ActiveTask.process, messages=records))
        self._timers.turn(self._active, self.run)
        self.size.observe(len(messages), self._clock.monotonic() - began)
        self.share = self.size.share(len(messages), bite)
        if commit:
            self._commits.commit_all(self._active, self.run)
        elif messages:
            self._commits.commit_first(self._active, self.run)
        return len(messages)

    def run(self, task: str, step: Callable[[ActiveTask], object]) -> None:
        """Run `step` on an active task: what it raises, or the commit it returns when
        that did not commit, goes to the task's lifecycle (the module docstring)."""
        active = self._active.get(task)
        if active is None:
            return
        try:
            done = step(active)
        except ROUND_ERRORS as exc:
            self._ended(task, event_of(exc), exc)
            return
        if isinstance(done, CommitResult) and not done.committed:
            assert done.error is not None
            self._ended(task, event_of_commit(done), done.error)

    def _ended(self, task: str, event: Event, why: BaseException) -> None:
        """A step ended in `event` (not a commit): the task's lifecycle decides."""
        retried = event in (Event.ABORTED, Event.PRODUCER_LOST, Event.VOIDED)
        log.log(logging.WARNING if retried else logging.ERROR, "%s", why)
        self._happened(task, event, str(why))
