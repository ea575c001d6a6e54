"""What the processor tells the coordinator and the scrape about its tasks.

`task_reports` builds the per-task reports every heartbeat carries: positions (T1 of
an active task, T2 of a replica), lag and update rate of replicas, and the tasks
activating, released or failed; `held_roles` says which tasks it reports in which role,
at a fraction of its cost. `StoreSizes` keeps the store sizes the metrics
collector reads at scrape time, refreshed from the loop at most once a second so a
scrape never waits on RocksDB.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from orchestrator.wire.clock import Clock, Deadline
from orchestrator.wire.protocol import AppliedOffsets, CommittedOffsets, TaskReport
from processor.active import ActiveTask
from processor.replica import Replay
from store import Store

__all__ = ["StoreSizes", "held_roles", "task_reports"]

_SIZES_REFRESH_S = 1.0        # approximate_bytes reads RocksDB properties: not every poll
_ERROR_CHARS = 4000           # a failed task's reason, cut to keep heartbeats small


def held_roles(active: Collection[str], replicas: Mapping[str, Replay],
               activating: Collection[str], released: Collection[str],
               failed: Collection[str]) -> list[tuple[str, str]]:
    """(task, role) of each report `task_reports` gives, in its order, without building
    them: cheap enough for every round of the loop, which rebuilds the reports at once
    only when these change (processor/daemon/main.py)."""
    roles = [(t, "active") for t in active]
    roles.extend((t, str(r.role)) for t, r in replicas.items())
    roles.extend((t, "activating") for t in activating if t not in replicas)
    roles.extend((t, "released") for t in released
                 if t not in active and t not in replicas and t not in activating)
    roles.extend((t, "failed") for t in failed)
    return roles


def task_reports(active: Mapping[str, ActiveTask], replicas: Mapping[str, Replay],
                 activating: Collection[str], released: Mapping[str, Mapping[str, int]],
                 failed: Mapping[str, str],
                 t1: Callable[[ActiveTask], dict[str, int]] | None = None,
                 stalled: Mapping[str, list[str]] | None = None) -> list[TaskReport]:
    """One report per task the processor holds, in its role (`held_roles`).

    Args:
        active: the active tasks (reported with T1, the handoff pause and the records/s
            they commit).
        replicas: warmups, standbys and replaying activations (T2, lag, rate; a
            changelog replica: the input offsets its changelog carried, and its lag in
            changelog records).
        activating: tasks still fencing (a replaying one is reported as a replica).
        released: final T1 of tasks released and not taken back.
        failed: the reason each failed task stopped.
        t1: an active task's reported positions (default: its committed offsets).
        stalled: task -> its partitions whose read has stalled (processor/runtime/
            stalls.py).
    """
    stalled = stalled or {}
    out: list[TaskReport] = []
    for task, role in held_roles(active, replicas, activating, released, failed):
        if role == "failed":
            out.append(TaskReport(task=task, role="failed",
                                  error=failed[task][:_ERROR_CHARS]))
        elif role == "released":
            out.append(TaskReport(task=task, role="released",
                                  committed=CommittedOffsets(dict(released[task]))))
        elif role == "active":
            a = active[task]
            out.append(TaskReport(task=task, role="active",
                                  committed=CommittedOffsets(t1(a) if t1 else dict(a.committed)),
                                  pause_ms=a.pause_ms, rate=a.update_rate(),
                                  stalled=stalled.get(task, [])))
        elif task in replicas:
            replica = replicas[task]
            out.append(TaskReport(task=task, role=replica.role,
                                  applied=AppliedOffsets(replica.reported_positions()),
                                  lag=replica.lag(), rate=replica.update_rate(),
                                  stalled=stalled.get(task, [])))
        else:
            out.append(TaskReport(task=task, role="activating"))
    return out


class StoreSizes:
    """Task -> store bytes, a snapshot for the scrape-time collector.

    Args:
        clock: paces the refresh.
    """

    def __init__(self, clock: Clock) -> None:
        self.bytes: dict[str, int] = {}
        self._due = Deadline.after(clock, 0.0)

    def refresh(self, active: Mapping[str, ActiveTask], replicas: Mapping[str, Replay]
                ) -> None:
        """Re-read the stores' sizes, at most once a second."""
        if not self._due.expired():
            return
        self._due.arm(_SIZES_REFRESH_S)
        stores: dict[str, Store] = {t: a.store for t, a in active.items()}
        stores.update({t: r.store for t, r in replicas.items()})
        self.bytes = {t: s.approximate_bytes() for t, s in stores.items()}

    def forget(self, task: str) -> None:
        """The task left this processor: its size is no longer ours to report."""
        self.bytes.pop(task, None)
