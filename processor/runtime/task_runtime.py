"""The task runtime: every task this processor holds, in its role, driven by one loop.

The role changes come from the coordinator's level-triggered replies (see
orchestrator/wire/protocol.py) through `apply()`, or from a test harness calling
`activate()`, `release()`, `start_replica()` and `drop()` directly. Everything runs
on the caller's thread: the daemon's main loop is the only owner of the consumers,
producers and stores; the heartbeat thread only exchanges snapshots with it.

The runtime holds the book of tasks (active, replicas, released, failed) and the
loop (`poll()`); its collaborators each own one concept: `Consumers` (assignment,
caps, expansion barriers), `Activations` (fence, replay, go active), `BulkPath`
(Spark catch-up), `ChangelogSource` (catch_up.source = "changelog": the mapping, its
replicas and writers), `reconcile` (a reply -> changes), `task_reports` and `StoreSizes`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Message

from metrics import NullProcessorMetrics, ProcessorMetrics
from orchestrator.wire.catchup import is_caught_up
from orchestrator.wire.clock import Clock, SystemClock
from orchestrator.wire.config import Config
from orchestrator.wire.protocol import HeartbeatReply, TaskReport
from processor.active import ActiveTask, ProducerFatal, TaskFailed, TaskFenced, TransactionAborted
from processor.changelog_replica import ChangelogError, ChangelogReplica
from processor.job import Job
from processor.replica import Replay, Replica, ReplicaRole
from processor.retention import InputTrimmedError, OffsetOutOfRange, check_retained
from processor.runtime.activation import Activations, StoreAheadError
from processor.runtime.barriers import BarrierBook, BarrierHolder
from processor.runtime.bulk_path import BulkPath, bulk_plan, changelog_bulk_plan
from processor.runtime.changelog_source import ChangelogSource
from processor.runtime.children import SplitChildren
from processor.runtime.consumers import Consumers, by_task, replay_by_task
from processor.runtime.dead_letters import ensure_dead_letter_topic
from processor.runtime.jobs import TaskJobs
from processor.runtime.preflight import FenceRefused
from processor.runtime.reconciliation import reconcile
from processor.runtime.reports import StoreSizes, task_reports
from processor.sources import ReplaySources, replay_sources, topic_counts
from store import Store, StoreError, TaskStore, task_store_path

__all__ = ["TaskRuntime", "replay_bite"]

log = logging.getLogger("baton.processor.runtime")

_BATCH = 5000                 # records per consume() call: amortises Python per-call cost
_REPLAY_BATCH_BESIDE_ACTIVE = 1000
_REPLAY_BATCH_BEFORE_ACTIVATION = 1000   # see replay_bite
# Active tasks commit side by side, on this many threads: a commit is a few broker round
# trips (flush, offsets, end of transaction) waited out with the GIL released, and one
# after the other four tasks' commits held the round, and so a release, for 50-280 ms.
_COMMIT_THREADS = 4
# while an activation runs, a round waits this long at most for records (or sleeps, with
# nothing to poll): the fence's end, or the activation's next step, is taken within it
_IDLE_WHILE_ACTIVATING_S = 0.01
# what a change of one task may raise and still leave the other tasks running
_TASK_ERRORS = (StoreError, StoreAheadError, KafkaException, OSError, TaskFenced,
                ProducerFatal, TaskFailed, ChangelogError, InputTrimmedError, OffsetOutOfRange,
                FenceRefused)


def replay_bite(active_took: int | None, activation_next: bool, input_replays: bool) -> int:
    """The most records one round's replay batch may hold.

    Args:
        active_took: what the round's active batch took (None: no active task here);
            the replay has what it left of a full batch, and at least a small bite.
        activation_next: an activation here is running, or a warmup has caught up.
        input_replays: a replica here replays the input through process().

    Then an input replay takes small bites: a full one held the loop ~100 ms, and the
    activation waited for it, inside the handoff pause. A changelog apply keeps its
    bite: a full one takes ~5 ms (about a million records/s), and small ones only added
    rounds to the other tasks' catch-up in a join.
    """
    bite = _BATCH if active_took is None else max(_REPLAY_BATCH_BESIDE_ACTIVE,
                                                  _BATCH - active_took)
    if activation_next and input_replays:
        return min(bite, _REPLAY_BATCH_BEFORE_ACTIVATION)
    return bite


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
        self.jobs = TaskJobs(config, processor_id, job)     # one instance per task
        self.group = f"baton.{config.job.name}"
        self.consumers = Consumers(config, self.group, self.clock)
        self.barrier_book = BarrierBook(config.job.name, config.job.partitioner,
                                        self.consumers.barriers, self._barrier_holders)
        self.active: dict[str, ActiveTask] = {}
        self.replicas: dict[str, Replay] = {}
        self.released: dict[str, dict[str, int]] = {}
        self.failed: dict[str, str] = {}
        self.model: dict[str, list[str]] = {}
        self.generation: int | None = None     # of the model held (sent with heartbeats)
        self.moving: set[str] = set()          # active tasks whose release is near
        self.children = SplitChildren(config.job.partitioner)
        self._awaiting: dict[str, str] = {}   # split child -> its parent, still activating
        self.activations = Activations(config, self.group, self.jobs, self.consumers,
                                       self.metrics, self.clock)
        self.bulk = BulkPath(config, self.metrics)
        self.changelog = ChangelogSource(config, self.consumers, self.clock)
        self._commit_every_s = config.processor.commit_interval_ms / 1000
        self._closing: list[Store] = []     # released tasks' stores, closed next round
        # closing a store flushes its memtable (100-200 ms at 250,000 keys under load) with
        # the GIL released: on a thread, the tasks still active here go on meanwhile
        self._closer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="baton-close")
        self._closes: list[Future[None]] = []
        self._committed_at = float("-inf")
        self._committer = ThreadPoolExecutor(max_workers=_COMMIT_THREADS,
                                             thread_name_prefix="baton-commit")

    @property
    def active_consumer(self) -> Consumer:
        return self.consumers.active

    @property
    def store_bytes(self) -> dict[str, int]:
        """Task -> store bytes, refreshed by `reports()` at most once a second."""
        return self._sizes.bytes

    # ---- the coordinator's API -------------------------------------------------------

    def apply(self, reply: HeartbeatReply) -> None:
        """Converge on the coordinator's view of this processor (level-triggered).

        A task whose change fails (store locked, broker error) is reported `failed`
        with the reason; the other tasks carry on.
        """
        if not reply.same_model:
            self.model = {t: list(ps) for t, ps in reply.tasks.items()}
            self.barrier_book.update(reply.barriers, topic_counts(self.model))
            self.changelog.update(reply.changelog, reply.generation)
            self.generation = reply.generation
        pending = self.children.pending if reply.same_model else reply.pending
        for child in reply.embedded:        # back inside its parent: a later leave counts
            self.released.pop(child, None)
        self.children.update(reply.embedded, pending, self.active, self.model,
                             self._child_left, self.released)
        reconcile(self, reply.assignment)
        self.moving = set(reply.moving)

    def activating(self, task: str) -> bool:
        """`task` is fencing or replaying on its way to active."""
        return task in self.activations

    def guard(self, task: str, change: Callable[[str], object]) -> None:
        """Run `change(task)`; on failure, mark the task failed and free what it held."""
        try:
            change(task)
        except _TASK_ERRORS as exc:
            log.error("task %r: %s", task, exc)
            self.failed[task] = str(exc)
            if isinstance(exc, InputTrimmedError):
                self.metrics.record_input_trimmed(task)
            if task in self.active:
                self.consumers.unassign_active(task)
                self.active.pop(task).store.close()
            replica = self.replicas.pop(task, None)
            if replica is not None:
                self.consumers.unassign_replay(replica.partitions)
                replica.store.close()
            activation = self.activations.pending.pop(task, None)
            if activation is not None and replica is None:
                activation.store.close()

    def partitions_of(self, task: str) -> list[str]:
        """What the task's owner consumes: its partitions and its embedded children's."""
        return self.children.consumed(task, self.model)

    def sources_of(self, task: str) -> ReplaySources:
        """What a replica of the task reads (S2): ancestors (split children), then its own."""
        barriers = {c: (b.parent, b.offset) for c, b in self.consumers.barriers.items()}
        return replay_sources(self.partitions_of(task), barriers,
                              self.config.job.partitioner, topic_counts(self.model))

    def replay_partitions(self, task: str) -> list[str]:
        """The partitions a replica of `task` reads, in order (S2; with the changelog
        source its changelog partition, none while the model maps it nowhere)."""
        if self.changelog.enabled:
            return self.changelog.partitions(task)
        return self.sources_of(task).partitions

    def _replica(self, task: str, store: Store, role: ReplicaRole,
                 committed: Mapping[str, int]) -> Replica:
        """A replica of `task` positioned from its store, capped at `committed` (T1)."""
        sources = self.sources_of(task)
        applied = store.applied_offsets()
        positions = {p: applied[p] if p in applied else self.consumers.low_watermark(p)
                     for p in sources.partitions}     # a lookup only when the store lacks it
        caps = {p: sources.cap(p, max(committed[p], 0)) for p in sources.partitions}
        # a checkpoint below the broker's first offset: the records between are gone
        check_retained(task, {p: applied[p] for p in sources.partitions if p in applied},
                       caps, self.consumers.low_watermark)
        job = self.jobs.get(task, role, self.partitions_of(task))
        replica = Replica(task, sources.partitions, job, store, role, positions, caps,
                          sources.filters, sources.gates, clock=self.clock)
        self.barrier_book.attach(replica)
        return replica

    def _barrier_holders(self) -> list[BarrierHolder]:
        return [*self.active.values(), *self.replicas.values()]

    def _child_left(self, child: str, parent: str) -> None:
        """A split child's handoff reached the release: release it from its parent here.
        A parent still activating here releases it once it is active (its fence stops
        whoever held the parent before from committing more of the child)."""
        if parent in self.active:
            self.guard(parent, functools.partial(self._release_child, child))
        elif self.activating(parent):
            self._awaiting[child] = parent

    def _release_awaiting(self) -> None:
        for child, parent in list(self._awaiting.items()):
            if parent in self.active or not self.activating(parent):
                del self._awaiting[child]
            if parent in self.active and child not in self.children.embedded:
                self.guard(parent, functools.partial(self._release_child, child))

    def _release_child(self, child: str, parent: str) -> None:
        """A split child leaves its parent: commit, stop consuming it, report it released."""
        self._run_active(parent, self._commit)      # an aborted commit rewinds to T1
        active = self.active.get(parent)
        if active is None:      # the parent itself had to restart: T1 is what Kafka holds
            self.released[child] = self.consumers.committed(self.model.get(child, []))
            return
        gone = [p for p in active.partitions if p not in self.partitions_of(parent)]
        released = {p: active.committed[p] for p in gone if p in active.committed}
        unseen = [p for p in self.model.get(child, []) if p not in released]
        released.update(self.consumers.committed(unseen))      # never consumed here
        self.released[child] = released
        self.consumers.drop_active(active, gone)
        log.info("task %r: split child %r released at %s", parent, child,
                 self.released[child])

    def _open_store(self, task: str, reads: bool = True) -> Store:
        self._close_released()
        path = task_store_path(self.config.state_dir, self.config.job.name, task,
                               self.processor_id)
        return TaskStore(Path(path), reads=reads)

    def activate(self, task: str) -> None:
        """Fence the previous owner, replay T2 -> T1 silently, then process with output
        (see processor/runtime/activation.py)."""
        replica = self.replicas.pop(task, None)
        if replica is not None:
            self.consumers.unassign_replay(replica.partitions)
        store = replica.store if replica else self._open_store(task)
        store.expect_reads()        # a changelog replica's store was only written so far
        self.activations.begin(task, store)

    def _after_fence(self, task: str) -> None:
        self.activations.verify_fenced(task, self.partitions_of(task))
        self.released.pop(task, None)
        if not self.changelog.enabled:
            self._replay_input(task)
            return
        # the previous owner is fenced: the changelog's committed end is final
        replay = self.activations.replay(task, functools.partial(
            self.changelog.replica, task, self.partitions_of(task)))
        if replay.caught_up():
            self._replay_input(task)
            return
        log.info("task %r: applying %d changelog records before going active", task,
                 replay.lag())
        self.replicas[task] = replay
        self.consumers.assign_replay(replay)

    def _replay_input(self, task: str) -> None:
        """Replay the input T2 -> T1 silently (with the changelog source, after the
        changelog: its input offsets are T1 already, unless it began after the store's
        history), then go active."""
        sources = self.sources_of(task).partitions
        replay = self.activations.replay(task, functools.partial(
            self._replica, task, committed=self.activations.committed(task, sources)))
        if replay.caught_up():
            self._go_active(replay)
            return
        if self.changelog.enabled:
            log.warning("task %r: the changelog does not reach the committed input offsets: "
                        "replaying %d input records through process() (did the job switch "
                        "to the changelog source?)", task, replay.lag())
        else:
            log.info("task %r: replaying %d records before going active", task, replay.lag())
        self.replicas[task] = replay
        self.consumers.assign_replay(replay)

    def _go_active(self, replay: Replica) -> None:
        changelog = (self.changelog.writer(replay.name, replay.store)
                     if self.changelog.enabled else None)
        active = self.activations.go_active(replay, self.partitions_of(replay.name),
                                            changelog)
        self.barrier_book.attach(active)
        active.on_misrouted = self.metrics.record_misrouted
        self.active[active.name] = active
        self.consumers.add_active(active)
        log.info("task %r: active from %s", active.name, active.committed)

    def release(self, task: str) -> dict[str, int]:
        """Stop fetching, commit the open transaction, return final T1; idempotent."""
        active = self.active.pop(task, None)
        if active is None:
            return dict(self.released.get(task, {}))
        started = self.clock.monotonic()
        try:
            count = active.commit()         # the final transaction counts like any other
            if count:
                self.metrics.record_processed(task, count)
                self.metrics.record_transaction(task, "committed")
        except (TaskFenced, ProducerFatal, TransactionAborted) as exc:
            # the open transaction is void: final T1 is the last committed offsets
            log.warning("task %r: release without its last transaction: %s", task, exc)
        finally:
            self.consumers.unassign_active(task)
            active.close()
            self.jobs.close(task)
            # closed at the next round, after the release is reported: closing a store
            # flushes its memtable (120 ms at 250,000 keys here, more under load), which
            # the new owner's activation, and so the pause, would otherwise wait out
            self._closing.append(active.store)
        self.released[task] = dict(active.committed)
        self._sizes.forget(task)
        self.metrics.record_handoff_step("releasing", self.clock.monotonic() - started)
        self.metrics.forget_task(task)      # its series now belong to the new owner
        log.info("task %r: released at %s", task, active.committed)
        return dict(active.committed)

    def start_replica(self, task: str, role: ReplicaRole) -> None:
        # applying a changelog never reads the store; replaying input does (process())
        store = self._open_store(task, reads=not self.changelog.enabled)
        if self.changelog.enabled:
            try:
                changelog = self.changelog.replica(task, self.partitions_of(task), store,
                                                   role)
            except BaseException:
                store.close()
                raise
            self.replicas[task] = changelog
            self.activations.prepare_producer(task)
            ranges = changelog_bulk_plan(changelog, self.config.catch_up.bulk_threshold) \
                if not store.applied_offsets() else None
            if ranges is not None:
                log.info("task %r: %d changelog records to apply: bulk path on Spark (%s)",
                         task, sum(hi - lo for lo, hi in ranges.values()),
                         self.config.spark.master)
                self.bulk.start(task, ranges, source="changelog")
                return      # the consumer takes the tail once the bulk result is ingested
            self.consumers.assign_replay(changelog)
            return
        applied = store.applied_offsets()
        partitions = self.sources_of(task).partitions
        replica = self._replica(task, store, role, self.consumers.committed(partitions))
        self.replicas[task] = replica
        self.activations.prepare_producer(task)
        bulk = bulk_plan(replica, self.config.catch_up.bulk_threshold) if not applied else None
        if bulk is not None:
            ranges, key_filter = bulk
            log.info("task %r: %d records to catch up: bulk path on Spark (%s)%s", task,
                     sum(hi - lo for lo, hi in ranges.values()), self.config.spark.master,
                     " with a key filter" if key_filter else "")
            self.bulk.start(task, ranges, key_filter)
            return          # the consumer takes the tail once the bulk result is ingested
        self.consumers.assign_replay(replica)

    def drop(self, task: str) -> None:
        """Forget a replica (its store stays on disk for a later return)."""
        self.activations.forget_producer(task)
        replica = self.replicas.pop(task, None)
        if replica is None:
            return
        self.consumers.unassign_replay(replica.partitions)
        replica.commit()
        replica.store.close()
        self.jobs.close(task)
        self.metrics.forget_task(task)

    def grow(self, task: str) -> None:
        """A task gained partitions (expansion, or a split child embedded again): start
        them from their committed offsets. A child's partitions whose history the store
        lacks (another processor consumed them meanwhile) need the silent replay first:
        the task activates again."""
        active = self.active[task]
        new = [p for p in self.partitions_of(task) if p not in active.partitions]
        children = {p for c, parent in self.children.embedded.items() if parent == task
                    for p in self.model.get(c, ())}
        rejoining = [p for p in new if p in children]
        if rejoining:
            applied = active.store.applied_offsets()
            committed = self.consumers.committed(rejoining)
            if any(applied.get(p, -1) < committed[p] for p in rejoining):
                log.info("task %r: split child partitions %s come back with history this "
                         "store lacks: activating again to replay it", task, rejoining)
                self._stop_active(task, "replaying a split child's partitions")
                del self.failed[task]
                self.guard(task, self.activate)
                return
        self.consumers.grow(active, self.partitions_of(task))
        self.barrier_book.attach(active)        # its new partitions may be parents too

    # ---- the loop ----------------------------------------------------------------------

    def poll(self, timeout: float = 0.1) -> int:
        """One round: active batch, replay batch, commits. Returns records handled.

        Active tasks commit when `commit_interval_ms` has passed since their last commit
        (or when the round is that long itself): the daemon's rounds are shorter, so new
        records are processed and replies taken within a few milliseconds."""
        handled = 0
        self._close_released(wait=False)
        for task in self.activations.fenced():
            self.guard(task, self._after_fence)
        if self._awaiting:
            self._release_awaiting()
        if self.bulk.busy:
            self.bulk.progress(self.replicas, self.consumers.assign_replay)
        split = timeout / 2 if self.active and self.replicas else timeout
        # a replay with a backlog must not wait on quiet active tasks: their poll does
        # not block, and the replay's bite is what their batch left of a full one
        backlog = any(r.lag() > 0 for r in self.replicas.values())
        took: int | None = None
        if self.active:
            took = self._poll_active(0.0 if backlog else split, self._commit_due(timeout))
            handled += took
        if self.replicas:
            room = replay_bite(took, self._activation_next(),
                               any(isinstance(r, Replica) for r in self.replicas.values()))
            handled += self._poll_replicas(split, room)
        if not self.active and not self.replicas:
            self.clock.sleep(min(timeout, _IDLE_WHILE_ACTIVATING_S)
                             if self.activations.pending else timeout)
        return handled

    def _commit_due(self, round_s: float) -> bool:
        return (round_s >= self._commit_every_s
                or self.clock.monotonic() - self._committed_at >= self._commit_every_s)

    def _close_released(self, wait: bool = True) -> None:
        """Close the released tasks' stores on the closer thread; with `wait`, until every
        close is done (a store is about to open, which may be one of them)."""
        while self._closing:
            self._closes.append(self._closer.submit(self._closing.pop().close))
        for done in [f for f in self._closes if wait or f.done()]:
            self._closes.remove(done)
            done.result()

    def _poll_active(self, timeout: float, commit: bool = True) -> int:
        self.consumers.release_barriers(self.active)
        self.children.prune(self.active)
        messages = self.consumers.poll_active(_BATCH, timeout, self.active)
        batches = by_task(messages, self.consumers.owner.get, self.consumers.log_error)
        for task, batch in batches.items():
            self._run_active(task, functools.partial(ActiveTask.process, messages=batch))
        if commit:
            self._committed_at = self.clock.monotonic()
            self._commit_all()
        return len(messages)

    def _commit_all(self) -> None:
        """Commit every active task's open transaction, side by side (`_COMMIT_THREADS`).
        Only the commits run on the threads, the main loop waiting: a task's failure is
        handled here, as for a commit of its own."""
        open_ = [task for task, active in self.active.items() if active.in_transaction]
        if len(open_) < 2:
            for task in open_:
                self._run_active(task, self._commit)
            return
        done = {task: self._committer.submit(_counted_commit, self.active[task])
                for task in open_}
        for task, outcome in done.items():
            self._run_active(task, functools.partial(self._commit, outcome=outcome))

    def _commit(self, active: ActiveTask,
                outcome: Future[tuple[bool, int]] | None = None) -> None:
        """Commit `active` (or take the result of its commit on a thread, `outcome`) and
        count it."""
        had_pause, count = outcome.result() if outcome is not None else _counted_commit(active)
        if not had_pause and active.pause_ms is not None:
            log.info("task %r: first output committed %.0f ms after activation began",
                     active.name, active.pause_ms)
        if not count:
            return
        self.metrics.record_processed(active.name, count)
        self.metrics.record_transaction(active.name, "committed")
        if not had_pause and active.pause_ms is not None:
            self.metrics.record_handoff_step("activating", active.pause_ms / 1000)

    def _run_active(self, task: str, step: Callable[[ActiveTask], None]) -> None:
        active = self.active.get(task)
        if active is None:
            return
        try:
            step(active)
        except TransactionAborted as exc:
            log.warning("%s; rewinding to %s", exc, active.committed)
            self.metrics.record_transaction(task, "aborted")
            self.consumers.rewind(active)
        except ProducerFatal as exc:
            log.warning("%s", exc)
            self._stop_active(task, str(exc))
            del self.failed[task]
            self.guard(task, self.activate)        # fence again, replay, carry on
        except (TaskFenced, TaskFailed, StoreAheadError) as exc:
            log.error("%s", exc)
            if isinstance(exc, TaskFenced):
                self.metrics.record_transaction(task, "fenced")
            self._stop_active(task, str(exc))

    def _stop_active(self, task: str, reason: str) -> None:
        """Stop a task without committing anything more."""
        active = self.active.pop(task)
        self.consumers.unassign_active(task)
        active.abort()
        active.store.close()
        self.jobs.close(task)
        self.failed[task] = reason
        self._sizes.forget(task)
        self.metrics.forget_task(task)      # fenced or failed: its series are not ours now

    def _poll_replicas(self, timeout: float, batch: int = _BATCH) -> int:
        """One replay batch of at most `batch` records (less beside busy active tasks,
        whose latency it adds to)."""
        self.consumers.refresh_caps(self.replicas.values(),
                                    lambda task: self.sources_of(task).ends)
        messages = self._consume_replays(batch, timeout)
        owner = {p: r.name for r in self.replicas.values() for p in r.partitions}
        out_of_range: dict[str, Message] = {}
        batches = replay_by_task(messages, owner,
                                 functools.partial(self._replay_error, out_of_range))
        read = self.consumers.read_through([r.partitions[0] for r in self.replicas.values()
                                            if isinstance(r, ChangelogReplica)])
        for task in list(self.replicas):
            mine = [out_of_range[p] for p in self.replicas[task].partitions
                    if p in out_of_range]       # the replica raises on it (retention.py)
            self.guard(task, functools.partial(self._apply_replica,
                                               messages=mine + batches.get(task, []),
                                               read=read))
        return len(messages)

    def _replay_error(self, out_of_range: dict[str, Message], msg: Message) -> None:
        """An error message the grouping took apart from the runs: a fetch below the
        broker's first offset goes to its replica, the others are logged."""
        if msg.error().code() == KafkaError._AUTO_OFFSET_RESET:  # noqa: SLF001
            out_of_range[f"{msg.topic()}:{msg.partition()}"] = msg
        else:
            self.consumers.log_error(msg)

    def _consume_replays(self, batch: int, timeout: float) -> list[Message]:
        """While an activation replays (a handoff's pause), only its records are read:
        the warmups and standbys wait, their fetched records kept in the replay
        consumer's queue, and the activation has the CPU to itself. While it only fences
        (broker round trips, 10-60 ms, waited out on a thread without the GIL) they go
        on, in `replay_bite`'s bites: in a join, the next task's catch-up stood still
        for every fence of the tasks before it."""
        consumer = self.consumers.replay
        if self.consumers.activating:
            consumer = self.consumers.activation
        if self.consumers.activating or self.activations.pending:
            timeout = min(timeout, _IDLE_WHILE_ACTIVATING_S)
        messages: list[Message] = consumer.consume(batch, timeout)
        return messages

    def _apply_replica(self, task: str, messages: list[Message], read: Mapping[str, int]
                       ) -> None:
        """Apply one replica's share of a poll batch and commit it (state and T2)."""
        replica = self.replicas[task]
        before = replica.applied_total
        try:
            capped = replica.apply(messages)
        except OffsetOutOfRange as exc:
            first = self.consumers.low_watermark(exc.partition)
            if replica.source == "input" and first > exc.offset:
                raise InputTrimmedError(exc.partition, exc.offset, first, task) from exc
            raise
        if replica.applied_total > before:
            self.metrics.record_catch_up(task, "consumer", replica.applied_total - before,
                                         replica.source)
        if isinstance(replica, ChangelogReplica) and replica.partition in read:
            replica.settle(read[replica.partition])
        replica.commit()
        self.consumers.pause_at_caps(capped)
        if replica.role == "activating" and replica.caught_up():
            del self.replicas[task]
            self.consumers.unassign_replay(replica.partitions)
            if isinstance(replica, Replica):
                self._go_active(replica)
            else:
                self._replay_input(task)        # the changelog is applied: the input's turn

    # ---- reports and shutdown ----------------------------------------------------------

    def reports(self) -> list[TaskReport]:
        self._sizes.refresh(self.active, self.replicas)
        # a failed task's reason ends up in `baton status`: a Kafka error may quote a secret
        failed = {task: self.config.mask(reason) for task, reason in self.failed.items()}
        return task_reports(self.active, self.replicas, self.activations.pending,
                            self.released, failed, self.consumers.consumed_through)

    def handoff_imminent(self) -> bool:
        """A warmup has caught up (its activation is next), an activation is running, or
        another processor catches up on a task active here (its release is next): the
        daemon then polls and heartbeats faster, to keep the pause short."""
        return self._activation_next() or not self.moving.isdisjoint(self.active)

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
                self._stop_active(task, "stopped without commit")
        self._close_released()
        for task in list(self.replicas):
            self.drop(task)
        self.activations.close(self.replicas)
        self.jobs.close_all()
        self.bulk.close()
        self.consumers.close()
        self._committer.shutdown(wait=True)
        self._closer.shutdown(wait=True)


def _counted_commit(active: ActiveTask) -> tuple[bool, int]:
    """Whether the task had committed output before, and its commit's record count."""
    had_pause = active.pause_ms is not None
    return had_pause, active.commit()
