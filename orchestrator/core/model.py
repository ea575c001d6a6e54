"""The job model: the grouping in force, its generation, and the expansion barriers.

The model changes at first start (group the inputs), on partition expansion, on a
split (`plan_split`), when a split child first goes live, and when the changelog
mapping gains tasks or is retired (`with_changelog`, `without_changelog`); each change
bumps the generation. It is persisted whole under the key "model" of the coordinator
stream. Pure data and functions: the partition counts and end offsets
come from the daemon's admin I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from orchestrator.core.changelog import changelog_partitions
from orchestrator.core.grouping import Grouping, expand, expansion_parents, group
from orchestrator.core.split import Split, plan_split

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
            once the parent is consumed up to the offset, its barrier marker's
            (orchestrator/wire/barrier.py); while the child is in `unsettled`, the
            parent's end when the expansion was seen (the barrier is never lower).
        unsettled: child partition -> when (wall-clock seconds) its barrier is due to
            be settled: `[job] expansion_grace_ms` after the expansion was seen.
        pending: split child task -> its parent task, until the child first goes live;
            meanwhile the parent's owner keeps consuming the child's partitions.
        changelog: task -> its partition of `baton.<job>.changelog`; empty until the
            job first runs with catch_up.source = "changelog" (orchestrator/core/changelog.py).
        changelog_retired: changelog partitions below this were used by a mapping the
            job retired (it ran on the input source since): never handed out again.
    """

    generation: int
    grouping: Grouping
    barriers: dict[str, tuple[str, int]] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)
    unsettled: dict[str, float] = field(default_factory=dict)
    changelog: dict[str, int] = field(default_factory=dict)
    changelog_retired: int = 0

    @classmethod
    def first(cls, inputs: Sequence[tuple[str, int]], scheme: str) -> JobModel:
        """Generation 1: `inputs` grouped from scratch with `scheme`.

        Raises:
            GroupingError: the inputs cannot be grouped (names the input).
        """
        return cls(1, group(inputs, scheme))

    @cached_property
    def tasks(self) -> dict[str, list[str]]:
        """Task name -> its input partitions, in task order (computed once per model:
        the coordinator reads it per task; callers must not change it)."""
        return {t.name: list(t.partitions) for t in self.grouping.tasks}

    @cached_property
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
                 ends: Mapping[str, int], due: float = 0.0) -> Expansion:
        """Apply a planned expansion with the parents' end offsets `ends`.

        Args:
            grouping: from `plan_expansion`.
            parents: from `plan_expansion`.
            ends: parent partition -> its end offset (high watermark) now: each new
                partition's barrier floor until it is settled.
            due: when (wall-clock seconds) the new barriers are to be settled (0: at once).
        """
        barriers = dict(self.barriers)
        unsettled = dict(self.unsettled)
        for child, parent in parents.items():
            barriers[child] = (parent, int(ends.get(parent, 0)))
            unsettled[child] = due
        old = self.counts()
        grown = {t: (old.get(t, 0), n) for t, n in grouping.inputs if old.get(t, 0) != n}
        model = replace(self, generation=self.generation + 1, grouping=grouping,
                        barriers=barriers, unsettled=unsettled)
        return Expansion(model, dict(parents), grown)

    def due(self, now: float) -> dict[str, list[str]]:
        """Parent partition -> its children whose barrier is due to be settled at `now`."""
        out: dict[str, list[str]] = {}
        for child, when in sorted(self.unsettled.items()):
            if when <= now:
                out.setdefault(self.barriers[child][0], []).append(child)
        return out

    def waits_for_settlement(self, partitions: Iterable[str]) -> bool:
        """Whether a barrier on the lineage of any of `partitions` is still unsettled
        (then a replay cannot know where its ancestors end)."""
        for partition in partitions:
            current, seen = partition, set()
            while current in self.barriers and current not in seen:
                if current in self.unsettled:
                    return True
                seen.add(current)
                current = self.barriers[current][0]
        return False

    def settled(self, markers: Mapping[str, int]) -> JobModel:
        """The model with the barriers of `markers` (child -> its marker's offset)
        settled; a marker below the floor is a corrupt answer and raises ValueError."""
        barriers = dict(self.barriers)
        for child, offset in markers.items():
            parent, floor = barriers[child]
            if offset < floor:
                raise ValueError(f"barrier marker of {child} at {parent} offset {offset} "
                                 f"is below the parent's end {floor} at the expansion")
            barriers[child] = (parent, int(offset))
        unsettled = {c: w for c, w in self.unsettled.items() if c not in markers}
        return replace(self, generation=self.generation + 1, barriers=barriers,
                       unsettled=unsettled)

    def plan_split(self) -> tuple[JobModel, tuple[Split, ...]]:
        """The model after splitting every task that can split (itself when none can).

        Raises:
            SplitError: the grouping cannot split (``single``).
        """
        grouping, splits = plan_split(self.grouping, self.barriers)
        if not splits:
            return self, ()
        pending = {**self.pending, **{s.child: self._root(s.parent) for s in splits}}
        changelog = (changelog_partitions([t.name for t in grouping.tasks], self.changelog)
                     if self.changelog else {})
        return replace(self, generation=self.generation + 1, grouping=grouping,
                       pending=pending, changelog=changelog), splits

    def with_changelog(self) -> JobModel:
        """The model with a changelog partition for every task (itself when every task
        has one already): see orchestrator/core/changelog.py."""
        changelog = changelog_partitions(list(self.tasks), self.changelog,
                                         self.changelog_retired)
        if changelog == self.changelog:
            return self
        return replace(self, generation=self.generation + 1, changelog=changelog)

    def changelog_written(self) -> int:
        """How many changelog partitions the job has written to (mapped or retired)."""
        return max(max(self.changelog.values(), default=-1) + 1, self.changelog_retired)

    def without_changelog(self) -> JobModel:
        """The model with its changelog mapping retired (the job runs on the input
        source: the partitions stop following the state); itself when it has none."""
        if not self.changelog:
            return self
        retired = max(self.changelog.values()) + 1
        return replace(self, generation=self.generation + 1, changelog={},
                       changelog_retired=max(retired, self.changelog_retired))

    def _root(self, task: str) -> str:
        """A pending child split again hands its keys on from its own live ancestor."""
        while task in self.pending:
            task = self.pending[task]
        return task

    def went_live(self, child: str) -> JobModel:
        """`child`'s first activation is done: its parent stops holding its partitions."""
        if child not in self.pending:
            return self
        pending = {c: p for c, p in self.pending.items() if c != child}
        return replace(self, generation=self.generation + 1, pending=pending)

    def held(self, task: str) -> list[str]:
        """What `task`'s owner consumes: its partitions plus its pending children's."""
        own = self.tasks.get(task, [])
        return own + [p for c, parent in self.pending.items() if parent == task
                      for p in self.tasks.get(c, [])]

    def report_problem(self, reports: Iterable[tuple[str, Iterable[str]]]) -> str | None:
        """Why task reports (task, partitions with positions) do not fit this model, or
        None. Positions may name any partition of the job: a processor one generation
        behind may still report one its task just handed to a split child."""
        names, partitions = self.known()
        for task, positions in reports:
            if task not in names:
                return (f"task {task!r} is not a task of job model generation "
                        f"{self.generation}")
            if partitions.issuperset(positions):    # the common case, in C
                continue
            stray = next(p for p in positions if p not in partitions)
            return f"task {task!r}: position of {stray!r}, not a partition of the job"
        return None

    def known(self) -> tuple[frozenset[str], frozenset[str]]:
        """(task names, partitions), computed once per model (models are immutable)."""
        cached: tuple[frozenset[str], frozenset[str]] | None = self.__dict__.get("_known")
        if cached is None:
            cached = (frozenset(t.name for t in self.grouping.tasks),
                      frozenset(p for t in self.grouping.tasks for p in t.partitions))
            object.__setattr__(self, "_known", cached)
        return cached

    def to_record(self) -> dict[str, Any]:
        record = {"generation": self.generation, "grouping": self.grouping.to_json(),
                  "barriers": {c: {"parent": p, "offset": o}
                               for c, (p, o) in sorted(self.barriers.items())},
                  "pending": dict(sorted(self.pending.items()))}
        if self.unsettled:
            record["unsettled"] = dict(sorted(self.unsettled.items()))
        if self.changelog:     # absent for a job that never used the changelog source
            record["changelog"] = dict(sorted(self.changelog.items()))
        if self.changelog_retired:
            record["changelog_retired"] = self.changelog_retired
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> JobModel:
        """Read `to_record()` output.

        Raises:
            GroupingError, KeyError, TypeError: a malformed record.
        """
        barriers = {str(c): (str(b["parent"]), int(b["offset"]))
                    for c, b in dict(record.get("barriers", {})).items()}
        pending = {str(c): str(p) for c, p in dict(record.get("pending", {})).items()}
        changelog = {str(t): int(n) for t, n in dict(record.get("changelog", {})).items()}
        unsettled = {str(c): float(w) for c, w in dict(record.get("unsettled", {})).items()}
        return cls(int(record["generation"]), Grouping.from_json(record["grouping"]), barriers,
                   pending, unsettled, changelog, int(record.get("changelog_retired", 0)))
