"""The task runtime: every task this processor holds, in its role, driven by one loop.

The role changes come from the coordinator's level-triggered replies (see
orchestrator/protocol.py) through `apply()`, or from a test harness calling
`activate()`, `release()`, `start_replica()` and `drop()` directly. Everything runs
on the caller's thread: the daemon's main loop is the only owner of the consumers,
producers and stores; the heartbeat thread only exchanges snapshots with it.

Two consumers, both `assign()`-based (the coordinator owns assignment, not Kafka's
group protocol) and `read_committed`: one for active tasks, one for replays.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from metrics import ProcessorMetrics, TransactionOutcome
from orchestrator.kafka.offsets import (
    committed_offsets,
    committed_once,
    watermarks,
)
from orchestrator.kafka.watched_producer import WatchedProducer
from orchestrator.wire.config import Config
from orchestrator.wire.partitioners import home_partition, state_key_bytes
from orchestrator.wire.partitions import split_partition
from orchestrator.wire.protocol import Barrier, HeartbeatReply, TaskReport
from processor.active import (
    ActiveTask,
    ProducerFatal,
    TaskFailed,
    TaskFenced,
    TransactionAborted,
)
from processor.job import Job, load_job
from processor.replica import Replica, ReplicaRole
from processor.sources import ReplaySources, consumed_partitions, replay_sources, topic_counts
from store import StoreError, TaskStore, task_store_path

if TYPE_CHECKING:       # the Spark path (and pyspark) loads only when a warmup needs it
    from processor.bulk import BulkResult

__all__ = ["StoreAheadError", "TaskRuntime"]

log = logging.getLogger("baton.processor.runtime")

_BATCH = 5000                 # records per consume() call: amortises Python per-call cost
_REPLAY_BATCH_BESIDE_ACTIVE = 1000
_CAP_REFRESH_S = 0.2          # how often replicas re-read the owner's committed offsets
# keys of a live split child dropped from its parent's store per loop turn: small enough
# that the parent's own records do not wait long behind it
_PRUNE_SLICE = 5000
_CAP_LOOKUP_TIMEOUT_S = 2.0   # a refresh that cannot answer this fast is skipped
_INIT_TXN_TIMEOUT_S = 30.0
# A partition assigned while a fetch is parked at the broker waits for that fetch to
# return; librdkafka's default (500 ms) would then sit inside every handoff pause.
_FETCH_WAIT_MS = 20
# A new owner's init_transactions often meets the old owner's just-finished transaction
# (CONCURRENT_TRANSACTIONS) and retries; librdkafka's default back-off (100 ms, growing)
# made that retry ~450 ms of every pause. Any [kafka] setting overrides these.
_PRODUCER_DEFAULTS: dict[str, Any] = {"retry.backoff.ms": 10, "retry.backoff.max.ms": 100,
                                      "queue.buffering.max.messages": 500_000,
                                      "linger.ms": 5}


@dataclass
class _Activation:
    """A task on its way to active: fencing, then replaying T2 -> T1."""

    store: TaskStore
    producer: WatchedProducer
    started: float
    fenced: Future[None]
    replaying: bool = False


class StoreAheadError(Exception):
    """A store claims to have applied records the owner never committed: refuse it."""


def _by_task(messages: Sequence[Message], task_of: Callable[[str], str | None],
             on_error: Callable[[Message], None]) -> dict[str, list[Message]]:
    """Group a batch by task; the broker returns runs of one partition, so the
    partition's name is built once per run, not per record."""
    by_task: dict[str, list[Message]] = {}
    run: tuple[str, int] | None = None
    bucket: list[Message] | None = None
    for msg in messages:
        if msg.error():
            on_error(msg)
            continue
        where = (msg.topic(), msg.partition())
        if where != run:
            run = where
            task = task_of(f"{where[0]}:{where[1]}")
            bucket = None if task is None else by_task.setdefault(task, [])
        if bucket is not None:
            bucket.append(msg)
    return by_task


def _tp(name: str, offset: int | None = None) -> TopicPartition:
    topic, number = split_partition(name)
    if offset is None:
        return TopicPartition(topic, number)
    return TopicPartition(topic, number, offset)


class TaskRuntime:
    """All tasks of one processor; call `poll()` in a loop."""

    def __init__(self, config: Config, processor_id: str, job: Job | None = None,
                 metrics: ProcessorMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics
        self.store_bytes: dict[str, int] = {}     # snapshot for the scrape-time collector
        self._store_bytes_at = 0.0
        self.processor_id = processor_id
        self.job = job or load_job(config.job.class_)()
        self.group = f"baton.{config.job.name}"
        settings = config.kafka_settings(**{
            "group.id": self.group, "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            "enable.partition.eof": False, "fetch.wait.max.ms": _FETCH_WAIT_MS})
        self._producer_settings = {k: v for k, v in config.kafka_settings().items()
                                   if not k.startswith(("receive.message", "fetch."))}
        self.active_consumer = Consumer(settings)
        self.replay_consumer = Consumer(settings)
        self.active: dict[str, ActiveTask] = {}
        self.replicas: dict[str, Replica] = {}
        self.released: dict[str, dict[str, int]] = {}
        self.failed: dict[str, str] = {}
        self.model: dict[str, list[str]] = {}
        self.embedded: dict[str, str] = {}        # split child -> the parent consuming it
        self.pending: dict[str, str] = {}         # split child (not live yet) -> parent
        self._pruning: dict[str, tuple[str, Iterator[list[Any]]]] = {}  # child -> parent, keys
        self._last_parent: dict[str, str] = {}    # released child -> the parent it left
        self.barriers: dict[str, Barrier] = {}
        self._owner: dict[str, str] = {}          # active partition -> task
        self._held: dict[str, set[str]] = {}      # task -> partitions waiting on a barrier
        self._paused: set[str] = set()
        self._caps_at = 0.0
        self._activations: dict[str, _Activation] = {}
        self._standby_producers: dict[str, WatchedProducer] = {}   # connected, not yet fencing
        self._bulk: dict[str, Future[BulkResult]] = {}       # warmups on the Spark path
        self._bulk_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="baton-bulk")
        self._spark_started = False
        self._replay_assigned: set[str] = set()
        self._fencer = ThreadPoolExecutor(max_workers=4, thread_name_prefix="baton-fence")

    # ---- the coordinator's API -------------------------------------------------------

    def apply(self, reply: HeartbeatReply) -> None:
        """Converge on the coordinator's view of this processor (level-triggered).

        A task whose change fails (store locked, broker error) is reported `failed`
        with the reason; the other tasks carry on.
        """
        self.model = {t: list(ps) for t, ps in reply.tasks.items()}
        self.barriers = dict(reply.barriers)
        self._children_changed(dict(reply.embedded), dict(reply.pending))
        wanted = reply.assignment
        replica_roles: dict[str, ReplicaRole] = {t: "warmup" for t in wanted.warmup}
        replica_roles.update({t: "standby" for t in wanted.standby})
        listed = set(wanted.active) | set(replica_roles)
        for task in [t for t in self.failed if t not in listed]:
            del self.failed[task]           # the coordinator has taken note and moved on
        for task in [t for t in self.active if t not in wanted.active]:
            self._guard(task, self.release)
        for task, replica in list(self.replicas.items()):
            stale = replica.partitions != self.sources_of(task).partitions
            if replica.role != "activating" and (stale or task not in listed):
                self._guard(task, self.drop)   # gone, or its partitions changed
            elif task in replica_roles and replica.role != "activating":
                replica.role = replica_roles[task]
        for task, role in replica_roles.items():
            if task not in self.replicas and task not in self.active \
                    and task not in self._activations and self._can_start(task):
                self._guard(task, functools.partial(self.start_replica, role=role))
        for task in wanted.active:
            if task not in self.active and task not in self._activations \
                    and self._can_start(task):
                self._guard(task, self.activate)
        for task in list(self.active):
            try:
                self._grow(task)
            except KafkaException as exc:       # the next reply retries; the task carries on
                log.warning("task %r: cannot start its new partitions yet: %s", task, exc)

    def _can_start(self, task: str) -> bool:
        return task in self.model and task not in self.failed

    def _guard(self, task: str, change: Callable[[str], object]) -> None:
        try:
            change(task)
        except (StoreError, StoreAheadError, KafkaException, OSError, TaskFenced,
                ProducerFatal, TaskFailed) as exc:
            log.error("task %r: %s", task, exc)
            self.failed[task] = str(exc)
            if task in self.active:
                self._unassign_active(task)
                self.active.pop(task).store.close()
            replica = self.replicas.pop(task, None)
            if replica is not None:
                self._unassign_replay(replica.partitions)
                replica.store.close()
            activation = self._activations.pop(task, None)
            if activation is not None and replica is None:
                activation.store.close()

    def partitions_of(self, task: str) -> list[str]:
        """What the task's owner consumes: its partitions and its embedded children's."""
        return consumed_partitions(task, self.model, self.embedded)

    def sources_of(self, task: str) -> ReplaySources:
        """What a replica of the task reads (S2): ancestors (split children), then its own."""
        barriers = {c: (b.parent, b.offset) for c, b in self.barriers.items()}
        return replay_sources(self.partitions_of(task), barriers,
                              self.config.job.partitioner, topic_counts(self.model))

    def _replica(self, task: str, store: TaskStore, role: ReplicaRole,
                 committed: Mapping[str, int]) -> Replica:
        """A replica of `task` positioned from its store, capped at `committed` (T1)."""
        sources = self.sources_of(task)
        applied = store.applied_offsets()
        positions = {p: applied.get(p, watermarks(self.replay_consumer, p)[0])
                     for p in sources.partitions}
        caps = {p: sources.cap(p, max(committed[p], 0)) for p in sources.partitions}
        return Replica(task, sources.partitions, self.job, store, role, positions, caps,
                       sources.filters, sources.gates)

    # ---- split children ------------------------------------------------------------------

    def _children_changed(self, embedded: dict[str, str], pending: dict[str, str]) -> None:
        """A child leaving its parent is released; one that went live is pruned from it."""
        leaving = {c: p for c, p in self.embedded.items() if embedded.get(c) != p}
        live = [c for c in self.pending if c not in pending]
        self.embedded, self.pending = embedded, pending
        for child, parent in leaving.items():
            if parent in self.active:
                self._guard(parent, functools.partial(self._release_child, child))
        for child in live:
            parent = self._last_parent.pop(child, "")
            if parent in self.active:
                self._start_pruning(parent, child)

    def _release_child(self, child: str, parent: str) -> None:
        """Commit the parent, stop consuming the child's partitions, report them released."""
        self._run_active(parent, self._commit)   # an aborted commit rewinds to T1
        active = self.active.get(parent)
        if active is None:      # the parent itself had to restart: T1 is what Kafka holds
            partitions = self.model.get(child, [])
            self.released[child] = committed_offsets(self.replay_consumer, partitions)
            return
        gone = [p for p in active.partitions if p not in self.partitions_of(parent)]
        mine = [p for p in gone if self._owner.get(p) == parent]
        for p in mine:
            del self._owner[p]
        if mine:
            self.active_consumer.incremental_unassign([_tp(p) for p in mine])
        self._held.get(parent, set()).difference_update(gone)
        self.released[child] = {p: active.committed[p] for p in gone if p in active.committed}
        for p in gone:
            active.partitions.remove(p)
            active.committed.pop(p, None)
            active.pending.pop(p, None)
        self._last_parent[child] = parent
        log.info("task %r: split child %r released at %s", parent, child, self.released[child])

    def _start_pruning(self, parent: str, child: str) -> None:
        """Drop the child's keys from the parent's store, a slice per loop turn."""
        counts = topic_counts(self.model)
        homes = [split_partition(p) for p in self.model.get(child, ())]
        partitioner = self.config.job.partitioner

        def belongs(key: Any) -> bool:
            raw = state_key_bytes(key)
            return raw is not None and any(
                home_partition(partitioner, raw, counts[t]) == n for t, n in homes)

        def slices() -> Iterator[list[Any]]:
            batch: list[Any] = []
            for key in list(self.active[parent].store):
                if belongs(key):
                    batch.append(key)
                if len(batch) >= _PRUNE_SLICE:
                    yield batch
                    batch = []
            yield batch

        self._pruning[child] = (parent, slices())

    def _prune(self) -> None:
        for child, (parent, slices) in list(self._pruning.items()):
            active = self.active.get(parent)
            batch = next(slices, None) if active is not None else None
            if active is None or batch is None:
                del self._pruning[child]
                continue
            for key in batch:
                active.store.delete(key)

    def _open_store(self, task: str) -> TaskStore:
        path = task_store_path(self.config.state_dir, self.config.job.name, task)
        return TaskStore(Path(path))

    def activate(self, task: str) -> None:
        """Fence the previous owner, replay T2 -> T1 silently, then process with output.

        Fencing (init_transactions) runs on a worker thread: it can take a broker round
        trip or a librdkafka retry timer, and other tasks must not wait for it.
        """
        replica = self.replicas.pop(task, None)
        if replica is not None:
            self._unassign_replay(replica.partitions)
        store = replica.store if replica else self._open_store(task)
        producer = self._standby_producers.pop(task, None) or self._producer(task)
        fenced = self._fencer.submit(producer.init_transactions, _INIT_TXN_TIMEOUT_S)
        self._activations[task] = _Activation(store, producer, time.monotonic(), fenced)

    def _producer(self, task: str) -> WatchedProducer:
        return WatchedProducer({**_PRODUCER_DEFAULTS, **self._producer_settings,
                         "transactional.id": f"{self.group}.{task}"})

    def _prepare_producer(self, task: str) -> None:
        """Connect a future owner's producer ahead of time (without fencing anyone):
        init_transactions on a cold producer can wait on librdkafka's 500 ms PID timer
        for the coordinator connection, and that wait would sit inside the pause."""
        if task not in self._standby_producers:
            producer = self._producer(task)
            self._fencer.submit(producer.list_topics, None, 10)
            self._standby_producers[task] = producer

    def _progress_activations(self) -> None:
        for task, activation in list(self._activations.items()):
            if not activation.replaying and activation.fenced.done():
                self._guard(task, self._after_fence)

    def _after_fence(self, task: str) -> None:
        activation = self._activations[task]
        activation.fenced.result()                 # raises what init_transactions raised
        log.debug("task %r: fenced in %.0f ms", task,
                  (time.monotonic() - activation.started) * 1000)
        partitions, store = self.partitions_of(task), activation.store
        sources = self.sources_of(task).partitions
        committed = committed_offsets(self.replay_consumer, sources)
        applied = store.applied_offsets()
        ahead = {p: (applied[p], committed[p]) for p in partitions
                 if applied.get(p, -1) > committed[p]}
        if ahead:
            raise StoreAheadError(
                f"task {task!r}: store {store.path} has applied offsets past the committed "
                f"ones (partition: (store, committed)) {ahead}; was the input topic recreated? "
                f"Move the store away to rebuild it from the input")
        self.released.pop(task, None)
        replay = self._replica(task, store, "activating", committed)
        activation.replaying = True
        if replay.caught_up():
            self._go_active(replay)
            return
        log.info("task %r: replaying %d records before going active", task, replay.lag())
        self.replicas[task] = replay
        self._assign_replay(replay)

    def _go_active(self, replay: Replica) -> None:
        task = replay.name
        activation = self._activations.pop(task)
        replay.commit()
        own = self.partitions_of(task)      # a split child's ancestors stay behind
        active = ActiveTask(task, own, self.job, replay.store, activation.producer,
                            self.config.job.output, f"{self.group}.dlq",
                            self.config.processor.on_error,
                            self.active_consumer.consumer_group_metadata,
                            {p: replay.caps[p] for p in own},
                            functools.partial(committed_offsets, self.replay_consumer))
        active.activated_at = activation.started
        if self.metrics is not None:
            active.on_process_error = self.metrics.record_process_error
        self.active[task] = active
        self._held[task] = set()
        self._assign_active(active, own)
        log.info("task %r: active from %s", task, active.committed)

    def release(self, task: str) -> dict[str, int]:
        """Stop fetching, commit the open transaction, return final T1; idempotent."""
        active = self.active.pop(task, None)
        if active is None:
            return dict(self.released.get(task, {}))
        started = time.monotonic()
        try:
            active.commit()
        except (TaskFenced, ProducerFatal, TransactionAborted) as exc:
            # the open transaction is void: final T1 is the last committed offsets
            log.warning("task %r: release without its last transaction: %s", task, exc)
        finally:
            self._unassign_active(task)
            active.close()
            active.store.close()
        self.released[task] = dict(active.committed)
        self.store_bytes.pop(task, None)
        if self.metrics is not None:
            self.metrics.record_handoff_step("releasing", time.monotonic() - started)
            self.metrics.forget_task(task)      # its series now belong to the new owner
        log.info("task %r: released at %s", task, active.committed)
        return dict(active.committed)

    def start_replica(self, task: str, role: ReplicaRole) -> None:
        store = self._open_store(task)
        applied = store.applied_offsets()
        partitions = self.sources_of(task).partitions
        replica = self._replica(task, store, role,
                                committed_offsets(self.replay_consumer, partitions))
        positions = replica.positions
        self.replicas[task] = replica
        self._prepare_producer(task)
        if not applied and self.config.catch_up.source == "input" and not replica.filters \
                and replica.lag() > self.config.catch_up.bulk_threshold:
            ranges = {p: (positions[p], replica.caps[p]) for p in partitions}
            log.info("task %r: %d records to catch up: bulk path on Spark (%s)", task,
                     replica.lag(), self.config.spark.master)
            self._bulk[task] = self._bulk_pool.submit(self._run_bulk, task, ranges)
            return          # the consumer takes the tail once the bulk result is ingested
        self._assign_replay(replica)

    def _run_bulk(self, task: str, ranges: dict[str, tuple[int, int]]) -> BulkResult:
        """On a worker thread: Spark only, no store or consumer of the main loop."""
        from processor.bulk import bulk_catch_up
        from processor.spark import spark_session, startup_seconds

        spark = spark_session(self.config.spark.master)
        if self.metrics is not None and not self._spark_started:
            self._spark_started = True
            self.metrics.record_spark_session_start(startup_seconds() or 0.0)
        return bulk_catch_up(spark, self.config.job.class_, self.config.kafka_settings(),
                             ranges, "input", task)

    def _progress_bulk(self) -> None:
        """Ingest finished bulk catch-ups (one atomic step); a failure falls back to the
        consumer path from where the store is, with a warning and a metric."""
        from processor.bulk import ingest_bulk

        for task, future in list(self._bulk.items()):
            if not future.done():
                continue
            del self._bulk[task]
            replica = self.replicas.get(task)
            try:
                result = future.result()
                if replica is None or replica.role == "activating":
                    result.cleanup()        # dropped or activated meanwhile: not needed
                    continue
                ingest_bulk(replica.store, result)
            except Exception as exc:  # noqa: BLE001 - any Spark failure: fall back
                log.warning("task %r: bulk catch-up failed, the consumer path takes over: %s",
                            task, exc)
                if self.metrics is not None:
                    self.metrics.record_bulk_fallback(task)
            else:
                replica.positions.update(result.offsets)
                log.info("task %r: bulk catch-up ingested %d records (%d keys) in %.1fs", task,
                         result.records, result.keys, result.timings.get("total", 0.0))
                if self.metrics is not None:
                    self.metrics.record_catch_up(task, "spark", result.records)
                    self.metrics.record_bulk_catch_up(result.timings.get("total", 0.0))
            if replica is not None and task in self.replicas:
                self._assign_replay(replica)

    def drop(self, task: str) -> None:
        """Forget a replica (its store stays on disk for a later return)."""
        self._standby_producers.pop(task, None)
        replica = self.replicas.pop(task, None)
        if replica is None:
            return
        self._unassign_replay(replica.partitions)
        replica.commit()
        replica.store.close()
        if self.metrics is not None:
            self.metrics.forget_task(task)

    # ---- the loop ----------------------------------------------------------------------

    def poll(self, timeout: float = 0.1) -> int:
        """One round: active batch, replay batch, commits. Returns records handled."""
        handled = 0
        self._progress_activations()
        if self._bulk:
            self._progress_bulk()
        split = timeout / 2 if self.active and self.replicas else timeout
        if self.active:
            handled += self._poll_active(split)
        if self.replicas:
            handled += self._poll_replicas(split)
        if not self.active and not self.replicas:
            time.sleep(min(timeout, 0.01) if self._activations else timeout)
        return handled

    def _poll_active(self, timeout: float) -> int:
        self._release_barriers()
        if self._pruning:
            self._prune()
        messages = self.active_consumer.consume(_BATCH, timeout)
        by_task = _by_task(messages, self._owner.get, self._log_error)
        for task, batch in by_task.items():
            self._run_active(task, lambda t, b=batch: t.process(b))
        for task in list(self.active):
            self._run_active(task, self._commit)
        return len(messages)

    def _commit(self, active: ActiveTask) -> None:
        had_pause = active.pause_ms is not None
        count = active.commit()
        if not had_pause and active.pause_ms is not None:
            log.info("task %r: first output committed %.0f ms after activation began",
                     active.name, active.pause_ms)
        if self.metrics is None or not count:
            return
        self.metrics.record_processed(active.name, count)
        self.metrics.record_transaction(active.name, "committed")
        if not had_pause and active.pause_ms is not None:
            self.metrics.record_handoff_step("activating", active.pause_ms / 1000)

    def _run_active(self, task: str, step: Any) -> None:
        active = self.active.get(task)
        if active is None:
            return
        try:
            step(active)
        except TransactionAborted as exc:
            log.warning("%s; rewinding to %s", exc, active.committed)
            self._count_transaction(task, "aborted")
            for p, offset in active.committed.items():
                if p in self._owner:
                    self.active_consumer.seek(_tp(p, offset))
        except ProducerFatal as exc:
            log.warning("%s", exc)
            self._stop_active(task, str(exc))
            del self.failed[task]
            self._guard(task, self.activate)        # fence again, replay, carry on
        except (TaskFenced, TaskFailed, StoreAheadError) as exc:
            log.error("%s", exc)
            if isinstance(exc, TaskFenced):
                self._count_transaction(task, "fenced")
            self._stop_active(task, str(exc))

    def _count_transaction(self, task: str, outcome: TransactionOutcome) -> None:
        if self.metrics is not None:
            self.metrics.record_transaction(task, outcome)

    def _stop_active(self, task: str, reason: str) -> None:
        """Stop a task without committing anything more."""
        active = self.active.pop(task)
        self._unassign_active(task)
        active.abort()
        active.store.close()
        self.failed[task] = reason

    def _poll_replicas(self, timeout: float) -> int:
        self._refresh_caps()
        # replays share the loop with active tasks: smaller bites keep their latency low
        batch = _REPLAY_BATCH_BESIDE_ACTIVE if self.active else _BATCH
        messages = self.replay_consumer.consume(batch, timeout)
        owner = {p: r.name for r in self.replicas.values() for p in r.partitions}
        by_task = _by_task(messages, owner.get, self._log_error)
        for task, replica in list(self.replicas.items()):
            before = replica.applied_total
            capped = replica.apply(by_task.get(task, ()))
            if self.metrics is not None and replica.applied_total > before:
                self.metrics.record_catch_up(task, "consumer", replica.applied_total - before)
            replica.commit()
            self._pause_at_caps(replica, capped)
            if replica.role == "activating" and replica.caught_up():
                del self.replicas[task]
                self._unassign_replay(replica.partitions)
                self._go_active(replica)
        return len(messages)

    def _refresh_caps(self) -> None:
        """Warmups and standbys follow the owner's committed offsets as they advance."""
        now = time.monotonic()
        if now - self._caps_at < _CAP_REFRESH_S:
            return
        self._caps_at = now
        following = [r for r in self.replicas.values() if r.role != "activating"]
        partitions = [p for r in following for p in r.partitions]
        if not partitions:
            return
        try:
            caps = committed_once(self.replay_consumer, partitions, _CAP_LOOKUP_TIMEOUT_S)
        except KafkaException as exc:       # keep the old caps; the next refresh retries
            log.debug("replica caps not refreshed: %s", exc)
            return
        for replica in following:
            sources = self.sources_of(replica.name)
            replica.caps = {p: sources.cap(p, caps[p]) for p in replica.partitions}
            resume = [p for p in replica.partitions
                      if p in self._paused and replica.positions[p] < replica.cap(p)]
            if resume:
                self._paused.difference_update(resume)
                self.replay_consumer.resume([_tp(p) for p in resume])
                for p in resume:
                    self.replay_consumer.seek(_tp(p, replica.positions[p]))

    def _pause_at_caps(self, replica: Replica, capped: Iterable[str]) -> None:
        new = [p for p in capped if p not in self._paused]
        if not new:
            return
        self.replay_consumer.pause([_tp(p) for p in new])
        self._paused.update(new)

    # ---- consumer assignment -----------------------------------------------------------

    def _assign_replay(self, replica: Replica) -> None:
        self.replay_consumer.incremental_assign(
            [_tp(p, replica.positions[p]) for p in replica.partitions])

    def _unassign_replay(self, partitions: Sequence[str]) -> None:
        # librdkafka keeps a partition's pause across incremental_unassign/assign: resume
        # first, or an activation replaying from a warmup paused at its cap never fetches.
        paused = [p for p in partitions if p in self._paused]
        if paused:
            self.replay_consumer.resume([_tp(p) for p in paused])
        self._paused.difference_update(partitions)
        if partitions:
            self.replay_consumer.incremental_unassign([_tp(p) for p in partitions])

    def _assign_active(self, active: ActiveTask, partitions: Sequence[str]) -> None:
        ready = [p for p in partitions if not self._barrier_holds(active, p)]
        self._held[active.name].update(p for p in partitions if p not in ready)
        for p in ready:
            self._owner[p] = active.name
        if ready:
            self.active_consumer.incremental_assign([_tp(p, active.committed[p]) for p in ready])

    def _unassign_active(self, task: str) -> None:
        mine = [p for p, t in self._owner.items() if t == task]
        for p in mine:
            del self._owner[p]
        self._held.pop(task, None)
        if mine:
            self.active_consumer.incremental_unassign([_tp(p) for p in mine])

    def _barrier_holds(self, active: ActiveTask, partition: str) -> bool:
        """A new partition waits until its parent is consumed up to the expansion barrier.

        The barrier is reached when every *record* before it was processed and
        committed. Transaction markers and aborted records also take offsets, so the
        parent's committed offset can stay below the barrier for good when a marker is
        the parent's last entry; the consumer's position moves past them, though. So:
        committed >= barrier, or nothing of the parent is uncommitted and the consumer
        has read up to the barrier.
        """
        barrier = self.barriers.get(partition)
        if barrier is None:
            return False
        if barrier.parent not in active.committed:
            parent = committed_offsets(self.replay_consumer, [barrier.parent])[barrier.parent]
            return bool(parent < barrier.offset)
        committed = active.committed[barrier.parent]
        if committed >= barrier.offset:
            return False
        if active.pending.get(barrier.parent) != committed \
                or self._owner.get(barrier.parent) != active.name:
            return True
        position = self.active_consumer.position([_tp(barrier.parent)])[0].offset
        return bool(position < barrier.offset)

    def _release_barriers(self) -> None:
        for task, held in self._held.items():
            if held:
                active = self.active[task]
                self._assign_active(active, [p for p in list(held)
                                             if not self._barrier_holds(active, p)])
                held.difference_update(self._owner)

    def _grow(self, task: str) -> None:
        """A task gained partitions (expansion): start them from their committed offsets."""
        active = self.active[task]
        new = [p for p in self.partitions_of(task) if p not in active.partitions]
        if not new:
            return
        committed = committed_offsets(self.replay_consumer, new)
        active.partitions.extend(new)
        active.committed.update(committed)
        active.pending.update(committed)
        self._assign_active(active, new)

    def _log_error(self, msg: Message) -> None:
        err = msg.error()
        if err.code() != KafkaError._PARTITION_EOF:  # noqa: SLF001
            log.warning("consumer error on %s:%s: %s", msg.topic(), msg.partition(), err)

    # ---- reports and shutdown ----------------------------------------------------------

    def _snapshot_store_bytes(self) -> None:
        """Sizes for the metrics collector, refreshed at most once a second."""
        now = time.monotonic()
        if now - self._store_bytes_at < 1.0:
            return
        self._store_bytes_at = now
        stores = {t: a.store for t, a in self.active.items()}
        stores.update({t: r.store for t, r in self.replicas.items()})
        self.store_bytes = {t: s.approximate_bytes() for t, s in stores.items()}

    def reports(self) -> list[TaskReport]:
        self._snapshot_store_bytes()
        out = [TaskReport(task=t, role="active", positions=self._consumed_through(a),
                          pause_ms=a.pause_ms) for t, a in self.active.items()]
        for task, replica in self.replicas.items():
            out.append(TaskReport(task=task, role=replica.role,
                                  positions=dict(replica.positions), lag=replica.lag(),
                                  rate=replica.update_rate()))
        out.extend(TaskReport(task=t, role="activating") for t, a in self._activations.items()
                   if t not in self.replicas)
        out.extend(TaskReport(task=t, role="released", positions=dict(p))
                   for t, p in self.released.items()
                   if t not in self.active and t not in self.replicas
                   and t not in self._activations)
        out.extend(TaskReport(task=t, role="failed", error=e[:4000])
                   for t, e in self.failed.items())
        return out

    def _consumed_through(self, active: ActiveTask) -> dict[str, int]:
        """T1 as reported: the committed offsets, moved past trailing transaction markers
        (and aborted records) where nothing of the partition is uncommitted. Without
        this, a partition whose last entry is a commit marker would show a lag of one
        forever."""
        positions = dict(active.committed)
        settled = [p for p, o in positions.items()
                   if active.pending.get(p) == o and self._owner.get(p) == active.name]
        if not settled:
            return positions
        for tp in self.active_consumer.position([_tp(p) for p in settled]):
            name = f"{tp.topic}:{tp.partition}"
            if tp.offset > positions[name]:
                positions[name] = tp.offset
        return positions

    def handoff_imminent(self) -> bool:
        """A warmup has caught up (its activation is next) or an activation is running:
        the daemon then polls and heartbeats faster, to keep the pause short."""
        near = self.config.catch_up.acceptable_lag
        return bool(self._activations) or any(
            r.role == "warmup" and r.lag() <= near for r in self.replicas.values())

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
        for task in list(self.replicas):
            self.drop(task)
        for task, activation in list(self._activations.items()):
            if task not in self.replicas:
                activation.store.close()
        self._activations.clear()
        self._standby_producers.clear()
        self._fencer.shutdown(wait=False, cancel_futures=True)
        self._bulk_pool.shutdown(wait=False, cancel_futures=True)
        self.active_consumer.close()
        self.replay_consumer.close()
