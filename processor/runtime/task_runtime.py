"""The task runtime: every task this processor holds, in its role, driven by one loop.

The role changes come from the coordinator's level-triggered replies (see
orchestrator/wire/protocol.py) through `apply()`, or from a test harness calling
`activate()`, `release()`, `start_replica()` and `drop()` directly. Everything runs
on the caller's thread: the daemon's main loop is the only owner of the consumers,
producers and stores; the heartbeat thread only exchanges snapshots with it.

What happens to a task is decided by its lifecycle table (processor/lifecycle.py): the
runtime turns a reply (through `reconcile`) or what a step raised or finished (a fence
done, a replay at T1, an aborted transaction) into an event, steps, and carries out the
commands (`happened`). It holds the tasks' objects (active, replicas, released, failed),
from which `state_of` reads where each task is, and the loop (`poll()`). Its
collaborators each own one concept: `Consumers` (who reads what), `CatchUp` (where
replicas rebuild state from: the input or the changelog), `Activations` (fence, replay,
go active), `BulkPath` (Spark catch-up), `Commits`, `TaskStores`, `TaskPartitions`,
`SplitChildren`, `reconcile` (a reply -> changes), `task_reports`, `StoreSizes` and
`close_producer`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Mapping

from confluent_kafka import Consumer

from metrics import NullProcessorMetrics, ProcessorMetrics
from orchestrator.wire.catchup import is_caught_up
from orchestrator.wire.clock import Clock, SystemClock
from orchestrator.wire.config import Config
from orchestrator.wire.protocol import HeartbeatReply, TaskReport
from processor.active import ActiveTask
from processor.job import Job
from processor.lifecycle import Command, Event, State, step
from processor.replica import Replay, ReplicaRole
from processor.runtime.activation import Activations
from processor.runtime.active_consumer import GROW_LOOKUP_S
from processor.runtime.active_round import ActiveRound
from processor.runtime.barriers import BarrierBook, BarrierHolder
from processor.runtime.bulk_path import BulkPath
from processor.runtime.catch_up import catch_up_source
from processor.runtime.child_release import ChildReleases
from processor.runtime.children import SplitChildren
from processor.runtime.commits import Commits
from processor.runtime.consumers import Consumers
from processor.runtime.dead_letters import ensure_dead_letter_topic
from processor.runtime.jobs import TaskJobs
from processor.runtime.load import LoadMeter
from processor.runtime.outcomes import TASK_ERRORS, event_of
from processor.runtime.producer_close import close_producer
from processor.runtime.reconciliation import held_state, reconcile
from processor.runtime.replay_round import ReplayRound, replay_bite
from processor.runtime.reports import StoreSizes, task_reports
from processor.runtime.stall_watch import StallWatch
from processor.runtime.stores import TaskStores
from processor.runtime.task_partitions import TaskPartitions
from processor.sources import topic_counts

__all__ = ["TaskRuntime"]

log = logging.getLogger("baton.processor.runtime")

# while an activation runs, a round waits this long at most for records (or sleeps, with
# nothing to poll): the fence's end, or the activation's next step, is taken within it
_IDLE_WHILE_ACTIVATING_S = 0.01


class TaskRuntime:
    """All tasks of one processor; call `poll()` in a loop.

    Args:
        config: the job's configuration.
        processor_id: this processor's stable id.
        job: the job to run (default: an instance of `job.class`).
        metrics: where to count (default: nowhere).
        clock: the time source (default: the system clock).

    Raises:
        DeadLetterTopicError: `processor.on_error` is "dlq" and the dead-letter topic
            `baton.<job>.dlq` is missing and cannot be created (it is created if missing).
    """

    def __init__(self, config: Config, processor_id: str, job: Job | None = None,
                 metrics: ProcessorMetrics | None = None, clock: Clock | None = None) -> None:
        self.config = config
        ensure_dead_letter_topic(config)     # before any client: raises DeadLetterTopicError
        self.clock = clock or SystemClock()
        self.metrics = NullProcessorMetrics() if metrics is None else metrics
        self._sizes = StoreSizes(self.clock)       # snapshot for the scrape-time collector
        self.processor_id = processor_id
        self.jobs = TaskJobs(config, processor_id, job,     # one instance per task
                             self.metrics.job_metrics)
        self.group = f"baton.{config.job.name}"
        self.consumers = Consumers(config, self.group, self.clock)
        self.consumers.on_replaced(self.metrics.record_consumer_replaced)
        self.load = LoadMeter(self.clock)       # the loop's busy share (load.py)
        self._slept_s = 0.0
        self.barrier_book = BarrierBook(config.job.name, config.job.partitioner,
                                        self.consumers.active.barriers, self._barrier_holders)
        self.active: dict[str, ActiveTask] = {}
        self.replicas: dict[str, Replay] = {}
        self.released: dict[str, dict[str, int]] = {}
        self.failed: dict[str, str] = {}
        self.generation: int | None = None     # of the model held (sent with heartbeats)
        self.releasing_soon: set[str] = set()          # active tasks whose release is near
        self.children = SplitChildren(config.job.partitioner)
        self.tasks = TaskPartitions(config.job.partitioner, self.consumers.active.barriers,
                                    self.children)
        self.stores = TaskStores(config, processor_id)
        self.activations = Activations(config, self.group, self.jobs, self.consumers,
                                       self.stores, self.metrics, self.clock)
        self.bulk = BulkPath(config, self.metrics)
        self.source = catch_up_source(config, self.tasks, self.consumers.lookups,
                                      self.consumers.replays.read_through, self.jobs,
                                      self.barrier_book, self.activations, self.clock)
        self.commits = Commits(config.processor.commit_interval_ms / 1000, self.metrics,
                               self.clock, config.processor.commit_timeout_ms / 1000)
        self.active_round = ActiveRound(self.active, self.consumers.active, self.children,
                                        self.commits, self.happened, self.clock)
        self.child_releases = ChildReleases(self)
        self.replay_round = ReplayRound(self.consumers.replays, self.source, self.metrics,
                                        self.guard, self._replay_done)
        self.stalls = StallWatch(config.processor.stall_timeout_ms / 1000, self.consumers,
                                 self.consumers.make_end_lookup, self.metrics, self.clock)
        self._commands = self._command_table()

    @property
    def active_consumer(self) -> Consumer:
        return self.consumers.active.consumer

    @property
    def model(self) -> Mapping[str, list[str]]:
        """Task -> partitions, as the coordinator's job model last had them."""
        return self.tasks.model

    @property
    def store_bytes(self) -> dict[str, int]:
        """Task -> store bytes, refreshed by `reports()` at most once a second."""
        return self._sizes.bytes

    # ---- the coordinator's API -----------------------------------------------------

    def apply(self, reply: HeartbeatReply, seen_failures: Collection[str] | None = None) -> None:
        """Converge on the coordinator's view of this processor (level-triggered);
        `seen_failures`: the failed tasks the heartbeat it answers reported (reconcile).
        A task whose change fails (store locked, broker error) is reported `failed`
        with the reason; the other tasks carry on."""
        if not reply.same_model:
            self.tasks.model = {t: list(ps) for t, ps in reply.tasks.items()}
            self.barrier_book.update(reply.barriers, topic_counts(self.tasks.model))
            self.source.update(reply.changelog, reply.generation)
            self.generation = reply.generation
        pending = self.children.pending if reply.same_model else reply.pending
        for child in reply.embedded:        # back inside its parent: a later leave counts
            self.released.pop(child, None)
        self.children.update(reply.embedded, pending, self.active, self.tasks.model,
                             self.child_releases.left, self.released)
        reconcile(self, reply.assignment, seen_failures)
        self.releasing_soon = set(reply.moving)

    def activating(self, task: str) -> bool:
        """`task` is fencing or replaying on its way to active."""
        return task in self.activations

    def replay_partitions(self, task: str) -> list[str]:
        """The partitions a replica of `task` reads, in order (its catch-up source's)."""
        return self.source.partitions(task)

    # ---- the lifecycle: processor/lifecycle.py decides, the runtime carries out ----

    def state_of(self, task: str) -> State:
        """Where `task` is on this processor, read from what holds it."""
        if task in self.activations:
            return State.REPLAYING if self.activations.pending[task].replaying \
                else State.FENCING
        state = held_state(self, task)
        return State.RELEASED if state is State.IDLE and task in self.released else state

    def happened(self, task: str, event: Event, reason: str = "") -> None:
        """Step `task` through the lifecycle table and carry out its commands."""
        for command in step(self.state_of(task), event).commands:
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
        """How the runtime carries out each command the lifecycle gives (reconciliation
        carries out the reply's own: processor/runtime/reconciliation.py)."""
        return {
            Command.REPLAY_FIRST: lambda task, _: self._replay_first(task),
            Command.REPLAY_NEXT: lambda task, _: self._replay_or_go_active(
                task, self.activations.next_replay(task)),
            Command.GO_ACTIVE: lambda task, _: self._go_active(task),
            Command.REWIND: lambda task, _: self._rewind(task),
            Command.STOP_ACTIVE: lambda task, _: self._stop_active(task),
            Command.ACTIVATE: lambda task, _: self.guard(task, self.activate),
            Command.FREE: lambda task, _: self._free(task),
            Command.MARK_FAILED: self.failed.__setitem__,
            Command.COUNT_ABORTED: lambda task, _: self.metrics.record_transaction(
                task, "aborted"),
            Command.COUNT_FENCED: lambda task, _: self.metrics.record_transaction(
                task, "fenced"),
            Command.COUNT_TRIMMED: lambda task, _: self.metrics.record_input_trimmed(task),
        }

    # ---- the commands, in a task's order: replica, activation, active, release -----

    def start_replica(self, task: str, role: ReplicaRole) -> None:
        """Start a warmup or standby of `task`: on Spark first when its store is fresh
        and its backlog large (processor/runtime/bulk_path.py), then on the consumer."""
        store = self.stores.open(task, reads=self.source.reads_store)
        try:
            replica = self.source.replica(task, store, role)
        except BaseException:
            store.close()
            raise
        self.replicas[task] = replica
        self.activations.prepare_producer(task)
        # the clients an activation of it will use, told its topics now (a cold
        # consumer's metadata request would sit inside the handoff pause)
        self.consumers.active.warm(self.tasks.of(task))
        self.consumers.replays.warm(self.replay_partitions(task))
        plan = self.source.bulk_plan(replica) if not store.applied_offsets() else None
        if plan is not None:
            self.bulk.start(task, plan)
            return          # the consumer takes the tail once the bulk result is ingested
        self.consumers.replays.assign(replica)

    def drop(self, task: str) -> None:
        """Forget a replica (its store stays on disk for a later return)."""
        self.activations.forget_producer(task)
        replica = self.replicas.pop(task, None)
        if replica is None:
            return
        self.consumers.replays.unassign(replica)
        replica.commit()
        replica.store.close()
        self.jobs.close(task)
        self.metrics.forget_task(task)

    def activate(self, task: str) -> None:
        """Fence the previous owner, replay silently, then process with output (see
        processor/runtime/activation.py)."""
        replica = self.replicas.pop(task, None)
        if replica is not None:
            self.consumers.replays.unassign(replica)
        store = replica.store if replica else self.stores.open(task)
        store.expect_reads()        # a changelog replica's store was only written so far
        self.activations.begin(task, store, self.tasks.of(task))

    def _replay_first(self, task: str) -> None:
        """The fence is done: check it held, then the activation's first replay."""
        self.activations.verify_fenced(task, self.tasks.of(task),
                                       self.source.changelog_of(task))
        self.released.pop(task, None)
        self._replay_or_go_active(
            task, self.activations.replay(task, self.source.activation_steps(task)))

    def _replay_or_go_active(self, task: str, replay: Replay | None) -> None:
        """Run the activation's next replay (None: every replay reached T1)."""
        if replay is None:
            self.happened(task, Event.ALL_REPLAYED)
            return
        self.replicas[task] = replay
        self.consumers.replays.assign(replay)

    def _replay_done(self, replay: Replay) -> None:
        """An activating replay caught up: the activation's next replay, or active."""
        self.happened(replay.name, Event.REPLAY_DONE)

    def _go_active(self, task: str) -> None:
        writer = self.source.writer(task, self.activations.pending[task].store)
        active = self.activations.go_active(task, self.tasks.of(task), writer)
        self.barrier_book.attach(active)
        active.on_misrouted = self.metrics.record_misrouted
        self.active[task] = active
        self.consumers.active.add(active)
        log.info("task %r: active from %s", task, active.committed)

    def grow(self, task: str) -> None:
        """A task gained partitions (expansion, or a split child embedded again): start
        them from their committed offsets. A child's partitions whose history the store
        lacks (another processor consumed them meanwhile) need the silent replay first:
        the task activates again."""
        active = self.active[task]
        new = [p for p in self.tasks.of(task) if p not in active.partitions]
        children = {p for c, parent in self.children.embedded.items() if parent == task
                    for p in self.tasks.model.get(c, ())}
        rejoining = [p for p in new if p in children]
        if rejoining:
            applied = active.store.applied_offsets()
            committed = self.consumers.lookups.committed_once(rejoining, GROW_LOOKUP_S)
            if any(applied.get(p, -1) < committed[p] for p in rejoining):
                log.info("task %r: split child partitions %s come back with history this "
                         "store lacks: activating again to replay it", task, rejoining)
                self.happened(task, Event.HISTORY_MISSING)
                return
        self.consumers.active.grow(active, self.tasks.of(task))
        self.barrier_book.attach(active)        # its new partitions may be parents too

    def _rewind(self, task: str) -> None:
        active = self.active[task]
        log.warning("task %r: rewinding to %s", task, active.committed)
        self.consumers.active.rewind(active)

    def _stop_active(self, task: str) -> None:
        """Stop a task without committing anything more."""
        active = self.active.pop(task)
        self.consumers.active.unassign(task)
        active.abort()
        active.store.close()
        close_producer(active.producer)
        self.jobs.close(task)
        self._sizes.forget(task)
        self.metrics.forget_task(task)      # fenced or failed: its series are not ours now

    def _free(self, task: str) -> None:
        """A change of `task` failed: free whatever it held (active, replica, activation)."""
        if task in self.active:
            self.consumers.active.unassign(task)
            active = self.active.pop(task)
            active.store.close()
            close_producer(active.producer)
        replica = self.replicas.pop(task, None)
        if replica is not None:
            self.consumers.replays.unassign(replica)
            replica.store.close()
        self.activations.abandon(task, close_store=replica is None)

    def release(self, task: str) -> dict[str, int]:
        """Stop fetching, commit the open transaction, return final T1; idempotent."""
        active = self.active.pop(task, None)
        if active is None:
            return dict(self.released.get(task, {}))
        started = self.clock.monotonic()
        try:
            last = self.commits.final(active)   # counted like any other transaction
            if last.committed:
                active.run_effects()
                if last.records:
                    self.metrics.record_processed(task, last.records)
                    self.metrics.record_transaction(task, "committed")
            else:
                # the open transaction is void: final T1 is the last committed offsets
                log.warning("task %r: release without its last transaction: %s", task,
                            last.error)
        finally:
            self.consumers.active.unassign(task)
            close_producer(active.producer)
            self.jobs.close(task)
            self.stores.close_later(active.store)   # once the release is reported: stores.py
        self.released[task] = dict(active.committed)
        self._sizes.forget(task)
        took = self.clock.monotonic() - started
        self.metrics.record_handoff_step("releasing", took)
        self.metrics.forget_task(task)      # its series now belong to the new owner
        log.info("task %r: released at %s (release %.0f ms)", task, active.committed,
                 took * 1000)
        return dict(active.committed)

    # ---- the loop ------------------------------------------------------------------

    def poll(self, timeout: float = 0.1) -> int:
        """One round: active batch, replay batch, commits. Returns records handled.

        Active tasks commit when `commit_interval_ms` has passed since their last commit
        (or when the round is that long itself): the daemon's rounds are shorter, so new
        records are processed and replies taken within a few milliseconds."""
        handled = 0
        self.stores.close_released(wait=False)
        for task in self.activations.fenced():
            self.guard(task, functools.partial(self.happened, event=Event.FENCE_DONE))
        if self.child_releases.waiting:
            self.child_releases.release_awaiting(self.children.embedded)
        if self.bulk.busy:
            self.bulk.progress(self.replicas, self.consumers.replays.assign)
        split = timeout / 2 if self.active and self.replicas else timeout
        # a replay with a backlog must not wait on quiet active tasks: their poll does
        # not block, and the replay's bite is what their batch left of a full one
        backlog = any(r.lag() > 0 for r in self.replicas.values())
        took: int | None = None
        if self.active:
            handled += self.active_round.poll(0.0 if backlog else split,
                                              self.commits.due(timeout))
            took = self.active_round.share
        if self.replicas:
            room = replay_bite(took, self._activation_next(),
                               self.source.replays_input(self.replicas.values()))
            handled += self._poll_replicas(split, room)
        self.stalls.look(self.active, self.replicas, self.bulk)
        if not self.active and not self.replicas:
            idle = min(timeout, _IDLE_WHILE_ACTIVATING_S) if self.activations.pending else timeout
            self.clock.sleep(idle)
            self._slept_s += idle
        self.load.update(self._slept_s + self.consumers.active.waited_s
                         + self.consumers.replays.waited_s)
        return handled

    def _poll_replicas(self, timeout: float, batch: int) -> int:
        """While an activation replays (a handoff's pause) only its records are read;
        while it only fences (broker round trips, 10-60 ms, waited out on a thread
        without the GIL) the others go on, in `replay_bite`'s bites."""
        if self.consumers.replays.activating or self.activations.pending:
            timeout = min(timeout, _IDLE_WHILE_ACTIVATING_S)
        if self.consumers.replays.activating:
            # a consume() waits out its timeout unless its batch fills: asking for no
            # more than the activation lacks returns as soon as the last of it arrives
            # (transaction markers take offsets too: then it waits, as before)
            left = sum(r.lag() for r in self.replicas.values() if r.role == "activating")
            batch = min(batch, max(1, left))
        return self.replay_round.run(self.replicas, timeout, batch)

    def _barrier_holders(self) -> list[BarrierHolder]:
        return [*self.active.values(), *self.replicas.values()]

    # ---- reports and shutdown ------------------------------------------------------

    def reports(self) -> list[TaskReport]:
        self._sizes.refresh(self.active, self.replicas)
        # a failed task's reason ends up in `baton status`: a Kafka error may quote a secret
        failed = {task: self.config.mask(reason) for task, reason in self.failed.items()}
        return task_reports(self.active, self.replicas, self.activations.pending,
                            self.released, failed, self.consumers.active.consumed_through,
                            self.stalls.stalled())

    def handoff_imminent(self) -> bool:
        """A warmup has caught up (its activation is next), an activation is running, or
        another processor catches up on a task active here (its release is next): the
        daemon then polls and heartbeats faster, to keep the pause short."""
        return self._activation_next() or not self.releasing_soon.isdisjoint(self.active)

    def _activation_next(self) -> bool:
        """An activation runs here, or a warmup has caught up (its activation is next)."""
        near = self.config.catch_up.acceptable_lag
        return bool(self.activations.pending) \
            or any(r.role == "warmup" and is_caught_up(r.lag(), near)
                   for r in self.replicas.values())

    def positions(self, task: str) -> Mapping[str, int]:
        if task in self.active:
            return self.active[task].committed
        return self.replicas[task].positions

    def close(self, commit: bool) -> None:
        """Graceful: release every active task. Not graceful: drop all, commit nothing."""
        for task in list(self.active):
            if commit:
                self.release(task)
            else:
                self._stop_active(task)
                self.failed[task] = "stopped without commit"
        self.stores.close_released()
        for task in list(self.replicas):
            self.drop(task)
        self.activations.close(self.replicas)
        self.jobs.close_all()
        self.bulk.close()
        self.stalls.close()
        self.consumers.close()
        self.commits.close()
        self.stores.close()
