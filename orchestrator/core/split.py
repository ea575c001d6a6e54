"""Task split after a partition expansion (KIP-253 processor expansion). Pure.

Rules and theory of operation (docs/design.md, "Growing past the number of tasks"):

- Fixed-task expansion keeps every key in its task, so a job never has more tasks than it
  started with. A split regroups the inputs *from scratch* with the job's scheme and
  compares: a fresh task whose name is new and whose partitions all sit in one current
  task T becomes T's **child**; T keeps the rest. (Under ``partition``: ``Partition 1``
  holding ``events:1`` and ``events:9`` gives child ``Partition 9`` with ``events:9``.
  Under ``cogroup`` the child takes the partitions whose index mod the new task count is
  its own; under ``ssp`` each added partition becomes its own task.)
- A fresh task spread over several current tasks is not a split (its keys' state is in
  several stores), and a task is never split into nothing: such tasks stay as they are.
- ``single`` is the user's choice of one task: refused with `SplitError`.
- Idempotent: after a split, regrouping from scratch gives no new name, so nothing more.
- A child's S2 is its partitions' ancestry (`orchestrator.wire.lineage`): each ancestor
  read with a key filter up to its barrier offset, then the child's own partitions.
- A child stays **pending** until its first activation: until then its parent's owner
  keeps consuming the child's partitions inside the parent task (same store, same
  transactional id), so the job never stops; the child's handoff takes them away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.core.grouping import Grouping, Task, group
from orchestrator.wire.lineage import s2_partitions

__all__ = ["Split", "SplitError", "plan_split"]


class SplitError(ValueError):
    """A split Baton refuses; the message says why and what to do instead."""


@dataclass(frozen=True)
class Split:
    """One child task carved out of `parent` (the pinned ``baton split --json`` entry)."""

    parent: str
    child: str
    partitions: tuple[str, ...]
    s2: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {"parent": self.parent, "child": self.child,
                "partitions": list(self.partitions), "s2": list(self.s2)}


def plan_split(grouping: Grouping,
               barriers: Mapping[str, tuple[str, int]]) -> tuple[Grouping, tuple[Split, ...]]:
    """The grouping after splitting every task that can split, and the splits.

    Returns:
        ``(grouping, ())`` unchanged when nothing can split (no expansion yet, or every
        task already holds what a fresh grouping would give it).

    Raises:
        SplitError: the scheme is ``single``.
    """
    if grouping.scheme == "single":
        raise SplitError("grouping 'single' keeps every partition in one task by choice: "
                         "it cannot split; regroup the job with another scheme (all state "
                         "is rebuilt) to use more processors")
    holder = _single_holders(grouping)
    current = {t.name for t in grouping.tasks}
    children: dict[str, list[Task]] = {}
    for fresh in group(grouping.inputs, grouping.scheme).tasks:
        owners = {holder.get(p) for p in fresh.partitions}
        if fresh.name in current or len(owners) != 1 or None in owners:
            continue
        children.setdefault(owners.pop() or "", []).append(fresh)
    tasks: list[Task] = []
    splits: list[Split] = []
    for task in grouping.tasks:
        kids = children.get(task.name, [])
        taken = {p for kid in kids for p in kid.partitions}
        rest = tuple(p for p in task.partitions if p not in taken)
        if not kids or not rest:
            tasks.append(task)
            continue
        tasks.append(Task(task.name, rest))
        splits += [Split(task.name, kid.name, kid.partitions,
                         tuple(s2_partitions(kid.partitions, barriers))) for kid in kids]
    if not splits:
        return grouping, ()
    tasks += [Task(s.child, s.partitions) for s in splits]
    return Grouping(grouping.scheme, grouping.inputs, tuple(tasks)), tuple(splits)


def _single_holders(grouping: Grouping) -> dict[str, str]:
    """Partition -> the one task holding it (partitions held by several are left out)."""
    seen: dict[str, list[str]] = {}
    for task in grouping.tasks:
        for partition in task.partitions:
            seen.setdefault(partition, []).append(task.name)
    return {p: names[0] for p, names in seen.items() if len(names) == 1}
