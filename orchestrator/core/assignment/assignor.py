""""""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.core.assignment.actives import plan_class
from orchestrator.core.assignment.balance import Scale
from orchestrator.core.assignment.model import (
    Assignment,
    AssignmentConfig,
    Move,
    ProcessorAssignment,
    ProcessorSnapshot,
    TaskInfo,
    View,
)
from orchestrator.core.assignment.standbys import plan_standbys

__all__ = ["owner_changes", "assign"]


def assign(tasks: Iterable[TaskInfo], processors: Iterable[ProcessorSnapshot],
           config: AssignmentConfig | None = None) -> Assignment:
    """Compute the next assignment from the previous one and the reported lags.

    Args:
        tasks: every task of the job; roles of tasks not listed here are dropped.
        processors: the live processors with their previous roles and lags.
        config: the ``[catch_up]`` settings; defaults to ``AssignmentConfig()``.

    Returns:
        Roles per processor (sorted by id) and whether a follow-up call is needed. With
        no processors, nothing can run: the result is empty.

    Raises:
        AssignmentError: duplicate task names or processor ids, or a task active on two
            processors.
    """
    view = View(tasks, processors, config or AssignmentConfig())
    if not view.procs:
        return Assignment((), follow_up=False)
    stateful = [t.name for t in view.tasks if t.stateful]
    stateless = [t.name for t in view.tasks if not t.stateful]
    main = plan_class(view, stateful, Scale.plain(view.caps), stateful=True)
    zeros = [0] * len(view.procs)
    free = plan_class(view, stateless, Scale(view.caps, main.targets, zeros), stateful=False)
    standby = plan_standbys(view, stateful, main,
                            [a + b for a, b in zip(main.targets, free.targets, strict=True)])
    roles: list[dict[str, list[str]]] = [
        {"active": [], "warmup": [], "standby": []} for _ in view.procs]
    for name, i in (main.owner | free.owner).items():
        roles[i]["active"].append(name)
    for name, j in main.warmup.items():
        roles[j]["warmup"].append(name)
    for name, holders in standby.items():
        for j in holders:
            roles[j]["standby"].append(name)
    return Assignment(
        tuple(ProcessorAssignment(p.id, *(tuple(sorted(r[k])) for k in ("active", "warmup",
                                                                         "standby")))
              for p, r in zip(view.procs, roles, strict=True)),
        follow_up=bool(main.warmup))



def owner_changes(previous: Iterable[ProcessorSnapshot], result: Assignment) -> tuple[Move, ...]:
    """The active tasks whose processor changed, by task name (placements included)."""
    before = {t: p.id for p in previous for t in p.active}
    return tuple(Move(t, before.get(t), pid) for t, pid in sorted(result.owners().items())
                 if before.get(t) != pid)
