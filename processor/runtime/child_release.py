"""A split child leaving its parent here, once the child's handoff reaches the release.

The parent commits, stops consuming the child's partitions and reports the child
`released` with their final T1 (processor/runtime/children.py says when). A parent
still activating here releases the child once it is active: its fence stops whoever
held the parent before from committing more of the child.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, MutableMapping
from typing import Protocol

from processor.active import ActiveTask
from processor.runtime.active_round import ActiveRound
from processor.runtime.commits import Commits
from processor.runtime.consumers import Consumers
from processor.runtime.task_partitions import TaskPartitions

__all__ = ["ChildReleases", "Parents"]

log = logging.getLogger("baton.processor.runtime")


class Parents(Protocol):
    """The task driver as a split child's release sees it."""

    @property
    def active(self) -> Mapping[str, ActiveTask]: ...
    @property
    def released(self) -> MutableMapping[str, dict[str, int]]: ...
    @property
    def tasks(self) -> TaskPartitions: ...
    @property
    def consumers(self) -> Consumers: ...
    @property
    def commits(self) -> Commits: ...

    def activating(self, task: str) -> bool: ...
    def guard(self, task: str, change: Callable[[str], object]) -> None: ...


class ChildReleases:
    """The split children leaving their parents on this processor.

    Args:
        parents: the task driver.
        active_round: runs the parent's commit as any step of an active task.
    """

    def __init__(self, parents: Parents, active_round: ActiveRound) -> None:
        self._parents = parents
        self._active_round = active_round
        self._awaiting: dict[str, str] = {}   # split child -> its parent, still activating

    def left(self, child: str, parent: str) -> None:
        """A split child's handoff reached the release: release it from its parent."""
        parents = self._parents
        if parent in parents.active:
            parents.guard(parent, functools.partial(self._release, child))
        elif parents.activating(parent):
            self._awaiting[child] = parent

    def release_awaiting(self, embedded: Mapping[str, str]) -> None:
        """Release the children whose parent has gone active meanwhile (`embedded`:
        the children now embedded again, which stay)."""
        parents = self._parents
        for child, parent in list(self._awaiting.items()):
            if parent in parents.active or not parents.activating(parent):
                del self._awaiting[child]
            if parent in parents.active and child not in embedded:
                parents.guard(parent, functools.partial(self._release, child))

    def _release(self, child: str, parent: str) -> None:
        """Commit the parent, stop consuming the child, report the child released."""
        parents = self._parents
        self._active_round.run(parent, parents.commits.commit)   # an abort rewinds to T1
        active = parents.active.get(parent)
        lookups = parents.consumers.lookups
        model = parents.tasks.model
        if active is None:      # the parent itself had to restart: T1 is what Kafka holds
            parents.released[child] = lookups.committed(model.get(child, []))
            return
        gone = [p for p in active.partitions if p not in parents.tasks.of(parent)]
        released = {p: active.committed[p] for p in gone if p in active.committed}
        unseen = [p for p in model.get(child, []) if p not in released]
        released.update(lookups.committed(unseen))      # never consumed here
        parents.released[child] = released
        parents.consumers.active.drop(active, gone)
        log.info("task %r: split child %r released at %s", parent, child, released)

    @property
    def waiting(self) -> bool:
        """Some child waits for its parent to go active."""
        return bool(self._awaiting)
