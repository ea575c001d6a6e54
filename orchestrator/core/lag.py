"""How far a replica is behind: T1 (where the owner has got) and the lag rule (pure).

Lag of a replica on a task = sum over the task's partitions of max(0, T1 - T2): T1 is
the owner's reported committed position (the released position during a release;
the group's committed offset when no owner reports; else the low watermark), T2 the
replica's reported position (a missing partition counts from the low watermark).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from metrics import LagSample
from orchestrator.core import handoff as hs
from orchestrator.core.liveness import Liveness, Processor
from orchestrator.core.model import JobModel
from orchestrator.core.settings import CoreConfig
from orchestrator.wire.lineage import AncestorRange, ancestry
from orchestrator.wire.protocol import TaskReport

__all__ = [
    "REPLICA_ROLES", "LagView", "ancestry_of", "consumed_position", "lag", "lag_samples", "t1",
]

# the roles of a replica that is catching up on (or standing by for) a task
REPLICA_ROLES = ("warmup", "standby", "activating")


class LagView(Protocol):
    """What the lag rule reads of the coordinator core (no import cycle)."""

    config: CoreConfig
    model: JobModel
    processors: Liveness
    low: dict[str, int]
    committed: dict[str, int]

    @property
    def handoffs(self) -> dict[str, hs.Handoff]: ...
    def report(self, pid: str | None, task: str) -> TaskReport | None: ...
    def owner(self, task: str) -> str | None: ...
    def holder(self, task: str) -> str | None: ...
    def consumed(self, task: str) -> list[str]: ...


def t1(core: LagView, task: str) -> dict[str, int | None]:
    """The owner's committed positions on `task`; None where nothing is known yet.

    A pending split child's partitions (and their ancestors) are reported by the
    owner of the parent it is embedded in, or by that owner's release of it."""
    reported: dict[str, int] = {}
    handoff = core.handoffs.get(task)
    source = handoff.source if handoff is not None else None
    released = core.report(source, task)
    consumer = core.model.pending.get(task, task)
    holder = core.report(core.owner(consumer), consumer)
    if holder is not None and holder.role == "active":
        reported.update(holder.committed)
    if released is not None and released.role == "released":
        reported.update(released.committed)
    out = {a.partition: consumed_position(core, a.partition)
           for a in ancestry_of(core.model, task)}
    out.update({p: reported.get(p, core.committed.get(p, core.low.get(p)))
                for p in core.consumed(task)})
    return out


def consumed_position(core: LagView, partition: str) -> int | None:
    """How far the task consuming `partition` has got (its owner's report), else the
    group's committed offset."""
    for task in core.model.tasks:
        if partition in core.consumed(task):
            report = core.report(core.holder(task), core.model.pending.get(task, task))
            if report is not None and partition in report.offsets():
                return report.offsets()[partition]
    return core.committed.get(partition, core.low.get(partition))


def ancestry_of(model: JobModel, task: str) -> list[AncestorRange]:
    """The ancestor ranges a split child's S2 reads (empty for other tasks)."""
    own = set(model.tasks.get(task, []))
    return [a for p in model.tasks.get(task, [])
            for a in ancestry(p, model.barriers) if a.partition not in own]


def lag(core: LagView, task: str, pid: str) -> int | None:
    """Records `pid`'s replica of `task` is behind T1; None without a replica report.

    A pending split child also counts what it has left of its ancestors (each up to
    its barrier); until the parent has consumed past every barrier (so the child's
    own partitions have started) its lag is unknown, never caught up."""
    report = core.report(pid, task)
    if report is None or report.role not in REPLICA_ROLES:
        return None
    if core.config.catch_up_source == "changelog":
        # changelog records between the replica's position and the partition's
        # committed end: only the processor reading it knows both
        return report.lag
    owner_at = t1(core, task)
    if any(v is None for v in owner_at.values()):
        return None  # T1 unknown: never call a replica caught up on a guess
    if core.model.waits_for_settlement(core.model.tasks.get(task, [])):
        return None  # where the child's keys leave its parent is not decided yet
    ends = {a.partition: a.end for a in ancestry_of(core.model, task)}
    if any((owner_at[a] or 0) < end for a, end in ends.items()):
        return None  # the parent has not reached a barrier yet: the child must wait
    return sum(max(0, min(v or 0, ends.get(p, v or 0))
                      - report.applied.get(p, core.low.get(p, 0)))
               for p, v in owner_at.items())


def lag_samples(core: LagView, processors: Iterable[Processor] | None = None,
                ) -> list[LagSample]:
    """Scrape-time view for metrics: every replica of every task (of `processors`,
    by default every live one)."""
    out = []
    for processor in core.processors.live() if processors is None else processors:
        for task, report in processor.reports.items():
            if report.role in (*REPLICA_ROLES, "active"):
                value = 0 if report.role == "active" else lag(core, task, processor.id)
                out.append(LagSample(task, processor.id, report.role, value, report.rate))
    return out

