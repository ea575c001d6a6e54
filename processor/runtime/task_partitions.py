"""What each task of the job model reads here: the owner's partitions (with its embedded
split children's) and a replica's sources S2 (processor/sources.py)."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.wire.protocol import Barrier
from processor.runtime.children import SplitChildren
from processor.sources import ReplaySources, replay_sources, topic_counts

__all__ = ["TaskPartitions"]


class TaskPartitions:
    """The job model's tasks, as partitions to read.

    Args:
        partitioner: the producers' partitioner name (`[job] partitioner`).
        barriers: the live expansion barriers (child partition -> Barrier).
        children: the split children embedded in their parents here.
    """

    def __init__(self, partitioner: str, barriers: Mapping[str, Barrier],
                 children: SplitChildren) -> None:
        self._partitioner = partitioner
        self._barriers = barriers
        self._children = children
        self.model: dict[str, list[str]] = {}     # task -> its partitions, as last sent

    def of(self, task: str) -> list[str]:
        """What the task's owner consumes: its partitions and its embedded children's."""
        return self._children.consumed(task, self.model)

    def sources(self, task: str) -> ReplaySources:
        """What an input replica of the task reads (S2): ancestors (split children),
        then its own."""
        barriers = {c: (b.parent, b.offset) for c, b in self._barriers.items()}
        return replay_sources(self.of(task), barriers, self._partitioner,
                              topic_counts(self.model))
