"""The task runtime: every task this processor holds, in its role, driven by one loop.

The role changes come from the coordinator's level-triggered replies (see
orchestrator/wire/protocol.py) through `apply()`. Everything runs on the caller's
thread: the daemon's main loop is the only owner of the consumers, producers and
stores; the heartbeat thread only exchanges snapshots with it.

What happens to a task is decided by its lifecycle table (processor/lifecycle.py) and
carried out by the `TaskDriver` (processor/runtime/driver.py), which holds the book of
tasks. The runtime builds the collaborators, each owning one concept (`Consumers`: who
reads what; `CatchUp`: where replicas rebuild state from; `Activations`: fence, replay,
go active; `BulkPath`: Spark catch-up; `Commits`; `TaskStores`; `TaskPartitions`;
`SplitChildren`), hands a reply to the driver, and runs the loop (`poll()`): the
active batch, the replay batch, the commits, what finished beside the loop.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Mapping

from confluent_kafka import Consumer

from metrics import NullProcessorMetrics, ProcessorMetrics
from orchestrator.wire.catchup import is_caught_up
from orchestrator.wire.clock import Clock, SystemClock
from orchestrator.wire.config import Config
from orchestrator.wire.protocol import HeartbeatReply, TaskReport
from processor.job import Job
from processor.lifecycle import Event
from processor.runtime.activation import Activations
from processor.runtime.active_round import ActiveRound
from processor.runtime.barriers import BarrierBook, BarrierHolder
from processor.runtime.bulk_path import BulkPath
from processor.runtime.catch_up import catch_up_source
from processor.runtime.child_release import ChildReleases
from processor.runtime.children import SplitChildren
from processor.runtime.commits import Commits
from processor.runtime.consumers import Consumers
from processor.runtime.dead_letters import ensure_dead_letter_topic
from processor.runtime.driver import DriverParts, TaskDriver
from processor.runtime.jobs import TaskJobs
from processor.runtime.load import LoadMeter
from processor.runtime.replay_round import ReplayRound, replay_bite
from processor.runtime.reports import StoreSizes, held_roles, task_reports
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

    `active`, `replicas`, `released` and `failed` are the driver's book of tasks, read
    only here (the driver changes them); a test harness changes tasks through `driver`.

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
        self.driver = TaskDriver(DriverParts(
            self.consumers, self.stores, self.activations, self.source, self.tasks,
            self.children, self.jobs, self.commits, self.bulk, self.barrier_book,
            self._sizes, self.metrics, self.clock))
        driver = self.driver
        self.active, self.replicas = driver.active, driver.replicas
        self.released, self.failed = driver.released, driver.failed
        self.active_round = ActiveRound(self.active, self.consumers.active, self.children,
                                        self.commits, driver.happened, self.clock)
        self.child_releases = ChildReleases(driver, self.active_round)
        self.replay_round = ReplayRound(self.consumers.replays, self.source, self.metrics,
                                        driver.guard, driver.replay_done)
        self.stalls = StallWatch(config.processor.stall_timeout_ms / 1000, self.consumers,
                                 self.consumers.make_end_lookup, self.metrics, self.clock)

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
        self.driver.reconcile(reply.assignment, seen_failures)
        self.releasing_soon = set(reply.moving)

    # ---- the loop ------------------------------------------------------------------

    def poll(self, timeout: float = 0.1) -> int:
        """One round: active batch, replay batch, commits. Returns records handled.

        Active tasks commit when `commit_interval_ms` has passed since their last commit
        (or when the round is that long itself): the daemon's rounds are shorter, so new
        records are processed and replies taken within a few milliseconds."""
        handled = 0
        self.stores.close_released(wait=False)
        driver = self.driver
        for task in self.activations.fenced():
            driver.guard(task, functools.partial(driver.happened, event=Event.FENCE_DONE))
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

    def held_roles(self) -> set[tuple[str, str]]:
        """(task, role) of every report `reports()` gives, without building them."""
        return set(held_roles(self.active, self.replicas, self.activations.pending,
                              self.released, self.failed))

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
                self.driver.release(task)
            else:
                self.driver.stop_active(task)
                self.failed[task] = "stopped without commit"
        self.stores.close_released()
        for task in list(self.replicas):
            self.driver.drop(task)
        self.activations.close(self.replicas)
        self.jobs.close_all()
        self.bulk.close()
        self.stalls.close()
        self.consumers.close()
        self.commits.close()
        self.stores.close()
