"""Reconciliation: converge on the coordinator's view of this processor.

Every heartbeat reply lists the tasks this processor should hold, by role; it is
level-triggered (a reply supersedes the previous one, and the same reply twice changes
nothing). `reconcile` turns it into changes, in an order that matters:

1. forget the failures the coordinator no longer lists (it has taken note and moved on),
   once it has seen them: a reply answers a heartbeat sent before a failure that came
   since, and a task that failed while its release was on its way (a fence, its
   transaction timed out by the broker) is listed by neither. Forgotten then, the
   failure would never be reported, and the coordinator would wait for a release that
   cannot come until it declared the whole processor dead;
2. release active tasks no longer listed active (their new owner waits for final T1);
3. drop replicas no longer listed or whose partitions changed, and switch the role of
   the others (warmup <-> standby); a replica replaying for an activation stays;
4. start the listed replicas this processor does not run yet;
5. activate the listed active tasks this processor does not run yet;
6. start the new partitions of active tasks (expansion).

Each change runs through the runtime's `guard`: a task whose change fails (store
locked, broker error) is reported `failed` with the reason; the other tasks carry on.
A task that failed is not started again until the coordinator stops listing it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Mapping, MutableMapping
from typing import Protocol

from confluent_kafka import KafkaException

from orchestrator.wire.protocol import RoleListing
from processor.active import ActiveTask
from processor.replica import Replay, ReplicaRole

__all__ = ["Reconcilable", "reconcile", "replica_roles"]

log = logging.getLogger("baton.processor.runtime")


class Reconcilable(Protocol):
    """The task runtime as reconciliation sees it: what it holds, and its changes."""

    @property
    def model(self) -> Mapping[str, list[str]]: ...
    @property
    def failed(self) -> MutableMapping[str, str]: ...
    @property
    def active(self) -> Mapping[str, ActiveTask]: ...
    @property
    def replicas(self) -> Mapping[str, Replay]: ...

    def activating(self, task: str) -> bool: ...
    def replay_partitions(self, task: str) -> list[str]: ...
    def guard(self, task: str, change: Callable[[str], object]) -> None: ...
    def release(self, task: str) -> dict[str, int]: ...
    def drop(self, task: str) -> None: ...
    def start_replica(self, task: str, role: ReplicaRole) -> None: ...
    def activate(self, task: str) -> None: ...
    def grow(self, task: str) -> None: ...


def replica_roles(wanted: RoleListing) -> dict[str, ReplicaRole]:
    """The replica role of every task listed as warmup or standby."""
    roles: dict[str, ReplicaRole] = {t: "warmup" for t in wanted.warmup}
    roles.update({t: "standby" for t in wanted.standby})
    return roles


def reconcile(runtime: Reconcilable, wanted: RoleListing,
              seen_failures: Collection[str] | None = None) -> None:
    """Apply the coordinator's listing `wanted` to `runtime` (see the module docstring).

    Args:
        seen_failures: the tasks reported failed in the heartbeat `wanted` answers
            (None: every failure was).
    """
    roles = replica_roles(wanted)
    listed = set(wanted.active) | set(roles)
    for task in [t for t in runtime.failed if t not in listed
                 and (seen_failures is None or t in seen_failures)]:
        del runtime.failed[task]
    for task in [t for t in runtime.active if t not in wanted.active]:
        runtime.guard(task, runtime.release)
    for task, replica in list(runtime.replicas.items()):
        stale = replica.partitions != runtime.replay_partitions(task)
        if replica.role != "activating" and (stale or task not in listed):
            runtime.guard(task, runtime.drop)   # gone, or its partitions changed
        elif task in roles and replica.role != "activating":
            replica.role = roles[task]
    for task, role in roles.items():
        if _idle(runtime, task) and _can_start(runtime, task):
            runtime.guard(task, functools.partial(runtime.start_replica, role=role))
    for task in wanted.active:
        if task not in runtime.active and not runtime.activating(task) \
                and _can_start(runtime, task):
            runtime.guard(task, runtime.activate)
    for task in list(runtime.active):
        try:
            runtime.grow(task)
        except KafkaException as exc:       # the next reply retries; the task carries on
            log.warning("task %r: cannot start its new partitions yet: %s", task, exc)


def _idle(runtime: Reconcilable, task: str) -> bool:
    """This processor runs `task` in no role (nor is on its way to active)."""
    return task not in runtime.replicas and task not in runtime.active \
        and not runtime.activating(task)


def _can_start(runtime: Reconcilable, task: str) -> bool:
    return task in runtime.model and task not in runtime.failed
