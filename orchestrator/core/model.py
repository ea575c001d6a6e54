"""The job model: the grouping in force, its generation, and the expansion barriers.

The model changes only at first start (group the inputs) and on partition expansion;
each change bumps the generation. It is persisted whole under the key "model" of the
coordinator stream. Pure data and functions: the partition counts and end offsets
come from the daemon's admin I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.core.grouping import Grouping, expand, expansion_parents, group

__all__ = ["Expansion", "JobModel"]


@dataclass(frozen=True)
class Expansion:
    """A fixed-task expansion, ready to apply: the new grouping and its barriers.

    Attributes:
        model: the model after the expansion (generation bumped).
        parents: new partition -> its parent partition.
        grown: topic -> (old count, new count), for logs and metrics.
    """

    model: JobModel
    parents: dict[str, str]
    grown: dict[str, tuple[int, int]]


@dataclass(frozen=True)
class JobModel:
    """What every processor must agree on: tasks, their partitions, barriers.

    Attributes:
        generation: bumped on every change of the grouping or the barriers.
        grouping: tasks and their input partitions.
        barriers: child partition -> (parent partition, offset): start the child only
            once the parent is consumed up to the offset recorded at expansion.
    """

    generation: int
    grouping: Grouping
    barriers: dict[str, tuple[str, int]] = field(default_factory=dict)

    @classmethod
    def first(cls, inputs: Sequence[tuple[str, int]], scheme: str) -> JobModel:
        """Generation 1: `inputs` grouped from scratch with `scheme`.

        Raises:
            GroupingError: the inputs cannot be grouped (names the input).
        """
        return cls(1, group(inputs, scheme))

    @property
    def tasks(self) -> dict[str, list[str]]:
        """Task name -> its input partitions, in task order."""
        return {t.name: list(t.partitions) for t in self.grouping.tasks}

    @property
    def partitions(self) -> list[str]:
        """Every input partition, in input order."""
        return [f"{topic}:{p}" for topic, n in self.grouping.inputs for p in range(n)]

    def counts(self) -> dict[str, int]:
        return dict(self.grouping.inputs)

    def plan_expansion(self, inputs: Sequence[tuple[str, int]]) -> tuple[Grouping, dict[str, str]]:
        """The grouping `inputs` would give, and each new partition's parent.

        Raises:
            GroupingError: a shrink or a non-multiple growth (names topic and counts).
        """
        grouping = expand(self.grouping, inputs)
        return grouping, expansion_parents(self.grouping, grouping)

    def expanded(self, grouping: Grouping, parents: Mapping[str, str],
                 ends: Mapping[str, int]) -> Expansion:
        """Apply a planned expansion with the parents' end offsets `ends`.

        Args:
            grouping: from `plan_expansion`.
            parents: from `plan_expansion`.
            ends: parent partition -> its end offset (high watermark) now.
        """
        barriers = dict(self.barriers)
        for child, parent in parents.items():
            barriers[child] = (parent, int(ends.get(parent, 0)))
        old = self.counts()
        grown = {t: (old.get(t, 0), n) for t, n in grouping.inputs if old.get(t, 0) != n}
        model = replace(self, generation=self.generation + 1, grouping=grouping,
                        barriers=barriers)
        return Expansion(model, dict(parents), grown)

    def to_record(self) -> dict[str, Any]:
        return {"generation": self.generation, "grouping": self.grouping.to_json(),
                "barriers": {c: {"parent": p, "offset": o}
                             for c, (p, o) in sorted(self.barriers.items())}}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> JobModel:
        """Read `to_record()` output.

        Raises:
            GroupingError, KeyError, TypeError: a malformed record.
        """
        barriers = {str(c): (str(b["parent"]), int(b["offset"]))
                    for c, b in dict(record.get("barriers", {})).items()}
        return cls(int(record["generation"]), Grouping.from_json(record["grouping"]), barriers)
