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

Each change runs through the driver's `guard`: a task whose change fails (store
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
from processor.lifecycle import Command, Event, Stage, listing_events, plan
from processor.replica import Replay, ReplicaRole

__all__ = ["Reconcilable", "held_stage", "reconcile", "replica_roles"]

log = logging.getLogger("baton.processor.runtime")


class Reconcilable(Protocol):
    """The task driver as reconciliation sees it: what it holds, and its changes."""

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
    """Apply the coordinator's listing `wanted` to `runtime` (see the module docstring):
    each task's events stepped through the lifecycle table (processor/lifecycle.py),
    then the commands, command by command across the tasks.

    Args:
        seen_failures: the tasks reported failed in the heartbeat `wanted` answers
            (None: every failure was).
    """
    roles = replica_roles(wanted)
    listed: dict[str, Stage] = {t: Stage.WARMUP if r == "warmup" else Stage.STANDBY
                                for t, r in roles.items()}
    listed.update({t: Stage.ACTIVE for t in wanted.active})
    tasks = dict.fromkeys([*runtime.failed, *runtime.active, *runtime.replicas, *listed])
    stages = {task: held_stage(runtime, task) for task in tasks}
    events: dict[str, tuple[Event, ...]] = {}
    for task in tasks:
        stage = stages[task]
        replica = runtime.replicas.get(task)
        stale = stage in (Stage.WARMUP, Stage.STANDBY) and replica is not None \
            and replica.partitions != runtime.replay_partitions(task)
        seen = stage is Stage.FAILED and (seen_failures is None or task in seen_failures)
        role = listed.get(task)
        if role is not None and task not in runtime.model:
            events[task] = (*((Event.REPARTITIONED,) if stale else ()), Event.LISTED_UNKNOWN)
        else:
            events[task] = listing_events(stage, role, stale, seen)
    for task, command in plan(stages, events):
        if command is not Command.FORGET_FAILURE and task in runtime.failed:
            continue        # it failed on an earlier command of this reply
        _carry_out(runtime, task, command, roles.get(task))


def held_stage(runtime: Reconcilable, task: str) -> Stage:
    """Where `task` is on this processor, as reconciliation sees it (a released task's
    final T1 is not its business: released is idle here)."""
    replica = runtime.replicas.get(task)
    if runtime.activating(task):
        return Stage.REPLAYING if replica is not None else Stage.FENCING
    if task in runtime.active:
        return Stage.ACTIVE
    if replica is not None:
        return Stage.WARMUP if replica.role == "warmup" else Stage.STANDBY
    return Stage.FAILED if task in runtime.failed else Stage.IDLE


def _carry_out(runtime: Reconcilable, task: str, command: Command,
               role: ReplicaRole | None) -> None:
    if command is Command.FORGET_FAILURE:
        del runtime.failed[task]
    elif command is Command.RELEASE:
        runtime.guard(task, runtime.release)
    elif command is Command.DROP:
        runtime.guard(task, runtime.drop)
    elif command is Command.SWITCH_ROLE:
        assert role is not None
        runtime.replicas[task].role = role
    elif command is Command.START_REPLICA:
        assert role is not None
        runtime.guard(task, functools.partial(runtime.start_replica, role=role))
    elif command is Command.ACTIVATE:
        runtime.guard(task, runtime.activate)
    elif command is Command.GROW:
        try:
            runtime.grow(task)
        except KafkaException as exc:       # the next reply retries; the task carries on
            log.warning("task %r: cannot start its new partitions yet: %s", task, exc)
    else:
        raise AssertionError(f"{command} is not a reply's command")
