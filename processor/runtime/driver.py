"""The task driver: carries out what the lifecycle table (processor/lifecycle.py) decides.

It holds the processor's book of tasks (what is active, a replica, released or failed;
an activation's own progress is `Activations`') and turns what happened to a task (a
heartbeat reply, a fence done, a replay at T1, what a step raised) into events, steps
the table (a reply's through `lifecycle.reply_plan`), and runs each `Command` it
returns: start or drop a replica, fence, replay, go active, grow, rewind, stop,
release, free. It decides nothing itself, and it does not loop: the runtime's `poll()`
(processor/runtime/task_runtime.py) does.

A test harness may call `activate()`, `release()`, `start_replica()` and `drop()`
directly, as a reply's commands do.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass

from confluent_kafka import KafkaException

from metrics import ProcessorMetrics
from orchestrator.wire.clock import Clock
from orchestrator.wire.protocol import RoleListing
from processor.active import ActiveTask
from processor.lifecycle import Command, Event, Stage, reply_plan, step
from processor.replica import Replay, ReplicaRole
from processor.runtime.activation import Activations
from processor.runtime.active_consumer import GROW_LOOKUP_S
from processor.runtime.barriers import BarrierBook
from processor.runtime.bulk_path import BulkPath
from processor.runtime.catch_up import CatchUp
from processor.runtime.children import SplitChildren
from processor.runtime.commits import Commits
from processor.runtime.consumers import Consumers
from processor.runtime.jobs import TaskJobs
from processor.runtime.outcomes import TASK_ERRORS, event_of
from processor.runtime.producer_close import close_producer
from processor.runtime.reports import StoreSizes
from processor.runtime.stores import TaskStores
from processor.runtime.task_partitions import TaskPartitions

__all__ = ["DriverParts", "TaskDriver", "replica_roles"]

log = logging.getLogger("baton.processor.runtime")


@dataclass(frozen=True)
class DriverParts:
    """What the driver carries commands out with, each owning one concept (see
    processor/runtime/__init__.py)."""

    consumers: Consumers
    stores: TaskStores
    activations: Activations
    source: CatchUp
    tasks: TaskPartitions
    children: SplitChildren
    jobs: TaskJobs
    commits: Commits
    bulk: BulkPath
    barrier_book: BarrierBook
    sizes: StoreSizes
    metrics: ProcessorMetrics
    clock: Clock


class TaskDriver:
    """The tasks of one processor, changed only as the lifecycle table says."""

    def __init__(self, parts: DriverParts) -> None:
        self._parts = parts
        # the parts a split child's release reaches (its protocol)
        self.tasks = parts.tasks
        self.consumers = parts.consumers
        self.commits = parts.commits
        self.active: dict[str, ActiveTask] = {}
        self.replicas: dict[str, Replay] = {}       # an activation's replay sits here too
        self.released: dict[str, dict[str, int]] = {}   # task -> its final T1
        self.failed: dict[str, str] = {}                # task -> the reason
        self._roles: dict[str, ReplicaRole] = {}        # the reply carried out: replicas
        self._commands = self._command_table()

    def activating(self, task: str) -> bool:
        """`task` is fencing or replaying on its way to active."""
        return task in self._parts.activations

    # ---- the lifecycle: processor/lifecycle.py decides, the driver carries out -----

    def stage_of(self, task: str) -> Stage:
        """Where `task` is on this processor, read from what holds it."""
        activations = self._parts.activations
        if task in activations:
            return Stage.REPLAYING if activations.pending[task].replaying \
                else Stage.FENCING
        if task in self.active:
            return Stage.ACTIVE
        replica = self.replicas.get(task)
        if replica is not None:
            return Stage.WARMUP if replica.role == "warmup" else Stage.STANDBY
        if task in self.failed:
            return Stage.FAILED
        return Stage.RELEASED if task in self.released else Stage.IDLE

    def reconcile(self, wanted: RoleListing,
                  seen_failures: Collection[str] | None = None) -> None:
        """Converge on the coordinator's listing `wanted` (`lifecycle.reply_plan`
        decides; `seen_failures`: the failed tasks the heartbeat it answers reported,
        None: every failure was). A command of a task that failed on an earlier command
        of the same reply is skipped: the failure is reported first."""
        self._roles = replica_roles(wanted)
        listed = {t: Stage.WARMUP if r == "warmup" else Stage.STANDBY
                  for t, r in self._roles.items()}
        listed.update({t: Stage.ACTIVE for t in wanted.active})
        tasks = dict.fromkeys([*self.failed, *self.active, *self.replicas, *listed])
        stages = {task: self.stage_of(task) for task in tasks}
        stale = {t for t in tasks if stages[t] in (Stage.WARMUP, Stage.STANDBY)
                 and self.replicas[t].partitions != self._parts.source.partitions(t)}
        for task, command in reply_plan(stages, listed, stale, seen_failures,
                                        self.tasks.model):
            if command is Command.FORGET_FAILURE or task not in self.failed:
                self._commands[command](task, "")

    def happened(self, task: str, event: Event, reason: str = "") -> None:
        """Step `task` through the lifecycle table and carry out its commands."""
        for command in step(self.stage_of(task), event).commands:
            self._commands[command](task, reason)

    def guard(self, task: str, change: Callable[[str], object]) -> None:
        """Run `change(task)`; what it raises is an event of the task's lifecycle (for
        a change of a task not active: free what it held and mark it failed)."""
        try:
            change(task)
        except TASK_ERRORS as exc:
            log.error("task %r: %s", task, exc)
            self.happened(task, event_of(exc), str(exc))

    def _command_table(self) -> dict[Command, Callable[[str, str], object]]:
        """How each command the lifecycle gives is carried out (a failed change of a
        task is an event of its own, through `guard`)."""
        metrics = self._parts.metrics
        return {
            Command.FORGET_FAILURE: lambda task, _: self.failed.pop(task, None),
            Command.RELEASE: lambda task, _: self.guard(task, self.release),
            Command.DROP: lambda task, _: self.guard(task, self.drop),
            Command.SWITCH_ROLE: lambda task, _: setattr(self.replicas[task], "role",
                                                          self._roles[task]),
            Command.START_REPLICA: lambda task, _: self.guard(task, functools.partial(
                self.start_replica, role=self._roles[task])),
            Command.GROW: lambda task, _: self._grow_or_retry(task),
            Command.REPLAY_FIRST: lambda task, _: self._replay_first(task),
            Command.REPLAY_NEXT: lambda task, _: self._replay_or_go_active(
                task, self._parts.activations.next_replay(task)),
            Command.GO_ACTIVE: lambda task, _: self._go_active(task),
            Command.REWIND: lambda task, _: self._rewind(task),
            Command.STOP_ACTIVE: lambda task, _: self.stop_active(task),
            Command.ACTIVATE: lambda task, _: self.guard(task, self.activate),
            Command.FREE: lambda task, _: self._free(task),
            Command.MARK_FAILED: self.failed.__setitem__,
            Command.COUNT_ABORTED: lambda task, _: metrics.record_transaction(task, "aborted"),
            Command.COUNT_FENCED: lambda task, _: metrics.record_transaction(task, "fenced"),
            Command.COUNT_TRIMMED: lambda task, _: metrics.record_input_trimmed(task),
        }

    # ---- the commands, in a task's order: replica, activation, active, release -----

    def start_replica(self, task: str, role: ReplicaRole) -> None:
        """Start a warmup or standby of `task`: on Spark first when its store is fresh
        and its backlog large (processor/runtime/bulk_path.py), then on the consumer."""
        parts = self._parts
        store = parts.stores.open(task, reads=parts.source.reads_store)
        try:
            replica = parts.source.replica(task, store, role)
        except BaseException:
            store.close()
            raise
        self.replicas[task] = replica
        parts.activations.fencer.prepare(task)
        # the clients an activation of it will use, told its topics now (a cold
        # consumer's metadata request would sit inside the handoff pause)
        parts.consumers.active.warm(self.tasks.of(task))
        parts.consumers.replays.warm(parts.source.partitions(task))
        plan = parts.source.bulk_plan(replica) if not store.applied_offsets() else None
        if plan is not None:
            parts.bulk.start(task, plan)
            return          # the consumer takes the tail once the bulk result is ingested
        parts.consumers.replays.assign(replica)

    def drop(self, task: str) -> None:
        """Forget a replica (its store stays on disk for a later return)."""
        parts = self._parts
        parts.activations.fencer.forget(task)
        replica = self.replicas.pop(task, None)
        if replica is None:
            return
        parts.consumers.replays.unassign(replica)
        replica.commit()
        replica.store.close()
        parts.jobs.close(task)
        parts.metrics.forget_task(task)

    def activate(self, task: str) -> None:
        """Fence the previous owner, replay silently, then process with output (see
        processor/runtime/activation.py). The fence's thread also reads T1 of every
        partition the replay reads (a split child's ancestors, an expansion child's
        parent): those lookups wait out another owner's transaction, beside the loop."""
        parts = self._parts
        replica = self.replicas.pop(task, None)
        if replica is not None:
            parts.consumers.replays.unassign(replica)
        store = replica.store if replica else parts.stores.open(task)
        store.expect_reads()        # a changelog replica's store was only written so far
        parts.activations.begin(task, store, self.tasks.of(task),
                                self.tasks.sources(task).partitions)

    def _replay_first(self, task: str) -> None:
        """The fence is done: check it held, then the activation's first replay."""
        parts = self._parts
        parts.activations.verify_fenced(task, self.tasks.of(task),
                                        parts.source.changelog_of(task))
        self.released.pop(task, None)
        self._replay_or_go_active(
            task, parts.activations.replay(task, parts.source.activation_steps(task)))

    def _replay_or_go_active(self, task: str, replay: Replay | None) -> None:
        """Run the activation's next replay (None: every replay reached T1)."""
        if replay is None:
            self.happened(task, Event.ALL_REPLAYED)
            return
        self.replicas[task] = replay
        self._parts.consumers.replays.assign(replay)

    def replay_done(self, replay: Replay) -> None:
        """An activating replay caught up: the activation's next replay, or active."""
        self.happened(replay.name, Event.REPLAY_DONE)

    def _go_active(self, task: str) -> None:
        parts = self._parts
        writer = parts.source.writer(task, parts.activations.pending[task].store)
        active = parts.activations.go_active(task, self.tasks.of(task), writer)
        parts.barrier_book.attach(active)
        active.on_misrouted = parts.metrics.record_misrouted
        self.active[task] = active
        parts.consumers.active.add(active)
        log.info("task %r: active from %s", task, active.committed)

    def _grow_or_retry(self, task: str) -> None:
        """Grow `task`; a broker that cannot say where its new partitions start yet
        leaves them to the next reply (the task carries on)."""
        try:
            self.grow(task)
        except KafkaException as exc:
            log.warning("task %r: cannot start its new partitions yet: %s", task, exc)

    def grow(self, task: str) -> None:
        """A task gained partitions (expansion, or a split child embedded again): start
        them from their committed offsets. A child's partitions whose history the store
        lacks (another processor consumed them meanwhile) need the silent replay first:
        the task activates again."""
        parts = self._parts
        active = self.active[task]
        new = [p for p in self.tasks.of(task) if p not in active.partitions]
        children = {p for c, parent in parts.children.embedded.items() if parent == task
                    for p in self.tasks.model.get(c, ())}
        rejoining = [p for p in new if p in children]
        if rejoining:
            applied = active.store.applied_offsets()
            committed = parts.consumers.lookups.committed_once(rejoining, GROW_LOOKUP_S)
            if any(applied.get(p, -1) < committed[p] for p in rejoining):
                log.info("task %r: split child partitions %s come back with history this "
                         "store lacks: activating again to replay it", task, rejoining)
                self.happened(task, Event.HISTORY_MISSING)
                return
        parts.consumers.active.grow(active, self.tasks.of(task))
        parts.barrier_book.attach(active)       # its new partitions may be parents too

    def _rewind(self, task: str) -> None:
        active = self.active[task]
        log.warning("task %r: rewinding to %s", task, active.committed)
        self._parts.consumers.active.rewind(active)

    def stop_active(self, task: str) -> None:
        """Stop a task without committing anything more."""
        parts = self._parts
        active = self.active.pop(task)
        parts.consumers.active.unassign(task)
        active.abort()
        active.store.close()
        close_producer(active.producer)
        parts.jobs.close(task)
        parts.sizes.forget(task)
        parts.metrics.forget_task(task)     # fenced or failed: its series are not ours now

    def _free(self, task: str) -> None:
        """A change of `task` failed: free whatever it held (active, replica, activation)."""
        parts = self._parts
        if task in self.active:
            parts.consumers.active.unassign(task)
            active = self.active.pop(task)
            active.store.close()
            close_producer(active.producer)
        replica = self.replicas.pop(task, None)
        if replica is not None:
            parts.consumers.replays.unassign(replica)
            replica.store.close()
        parts.activations.abandon(task, close_store=replica is None)

    def release(self, task: str) -> dict[str, int]:
        """Stop fetching, commit the open transaction, return final T1; idempotent."""
        active = self.active.pop(task, None)
        if active is None:
            return dict(self.released.get(task, {}))
        parts = self._parts
        started = parts.clock.monotonic()
        try:
            last = parts.commits.final(active)  # counted like any other transaction
            if last.committed:
                active.run_effects()
                if last.records:
                    parts.metrics.record_processed(task, last.records)
                    parts.metrics.record_transaction(task, "committed")
            else:
                # the open transaction is void: final T1 is the last committed offsets
                log.warning("task %r: release without its last transaction: %s", task,
                            last.error)
        finally:
            parts.consumers.active.unassign(task)
            close_producer(active.producer)
            parts.jobs.close(task)
            parts.stores.close_later(active.store)  # once the release is reported: stores.py
        self.released[task] = dict(active.committed)
        parts.sizes.forget(task)
        took = parts.clock.monotonic() - started
        parts.metrics.record_handoff_step("releasing", took)
        parts.metrics.forget_task(task)     # its series now belong to the new owner
        log.info("task %r: released at %s (release %.0f ms)", task, active.committed,
                 took * 1000)
        return dict(active.committed)


def replica_roles(wanted: RoleListing) -> dict[str, ReplicaRole]:
    """The replica role of every task listed as warmup or standby."""
    roles: dict[str, ReplicaRole] = {t: "warmup" for t in wanted.warmup}
    roles.update({t: "standby" for t in wanted.standby})
    return roles
