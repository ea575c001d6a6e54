"""Activation: a task on its way to active.

Three steps, each started by the driver from the loop:

1. *fence* (`begin`, `Fencer`): the task's producer takes its transactional id
   (`init_transactions`), which fences the previous owner's, and T1 is read. Both are
   broker round trips, and `init_transactions` can sit on a librdkafka retry timer, so
   they run on worker threads and the loop only checks whether they are done: other
   tasks must not wait for them. A future owner's producer is connected ahead of time
   (`Fencer.prepare`), so that wait for the transaction coordinator's connection is not
   part of the handoff pause either;
2. *check and replay* (`verify_fenced`, `replay`, `next_replay`): the store must not
   lead the committed offsets (T1); the task then replays silently, as a replica in
   the `activating` role, the steps its catch-up source gives
   (processor/runtime/catch_up.py): T2 -> T1 of the input, or first the changelog to
   its committed end (final now: the previous owner is fenced).
3. *go active* (`go_active`): once caught up, the replica's store and the fenced
   producer become an `ActiveTask` that processes with output from T1.

*Void commits.* Once the fence is up, no transaction of the task can still be ending,
so T1 is stable at once, unless the brokers completed an earlier transaction without
writing its markers (processor/transaction.py, `resettle`): its offset commit then
stays pending and a stable lookup never answers. After `STABLE_T1_WAIT_S` the task
takes the settled offsets as T1, aborts that transaction's open records and commits T1
in its place; a store that had applied the void transaction is moved aside and rebuilt.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Container, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from metrics import ProcessorMetrics
from orchestrator.kafka.logs import client_logging
from orchestrator.kafka.retry import kafka_error
from orchestrator.kafka.settings import producer_settings
from orchestrator.kafka.watched_producer import WatchedProducer
from orchestrator.wire.clock import Clock, Deadline
from orchestrator.wire.config import Config
from processor.active import ActiveTask
from processor.changelog import ChangelogTarget, ChangelogWriter
from processor.effects import AfterCommit
from processor.replica import Replay, ReplicaRole
from processor.runtime.consumers import Consumers
from processor.runtime.dead_letters import dlq_topic
from processor.runtime.jobs import TaskJobs
from processor.runtime.lookups import Lookups
from processor.runtime.preflight import DEFAULT_TRANSACTION_TIMEOUT_MS, fence_refused
from processor.runtime.producer_close import close_producer
from processor.runtime.stores import TaskStores
from processor.transaction import resettle, written_topics
from store import Store

__all__ = ["Activation", "Activations", "Fencer", "ReplayStep", "StoreAheadError"]

log = logging.getLogger("baton.processor.runtime")

_INIT_TXN_TIMEOUT_S = 30.0
# init_transactions answers that ask for the same call again a little later
_FENCE_AGAIN = {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.CONCURRENT_TRANSACTIONS,
                KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE}
# how long a stable T1 lookup may wait after the fence before the task takes its pending
# offset commit for one the brokers ended without markers (the module doc, void commits)
STABLE_T1_WAIT_S = 10.0
# A new owner's init_transactions often meets the old owner's just-finished transaction
# (CONCURRENT_TRANSACTIONS) and retries; librdkafka's default back-off (100 ms, doubling)
# would put most of a retry's wait inside the pause, where the markers take a few ms. A
# transaction left open by an owner that died holds back, on Apache Kafka, its
# partitions' last stable offset (read_committed readers of the output and changelog)
# and the group's offsets (an OffsetFetch answers UNSTABLE_OFFSET_COMMIT, so a warmup or
# the coordinator asking for T1 waits) until the broker aborts it after
# `transaction.timeout.ms`: librdkafka's 60 s would stall such a warmup for a minute;
# 10 s is Kafka Streams' exactly-once default (transactions here commit every
# `commit_interval_ms`). librdkafka's re-bootstrap can strand a pending TxnOffsetCommit,
# and send_offsets_to_transaction then blocks past its own timeout (librdkafka issue
# 5511, across a broker restart): a task's producer never re-bootstraps. One that lost
# every broker fails its next commit and the task restarts with a new producer. Any
# [kafka] setting overrides these.
_PRODUCER_DEFAULTS: dict[str, Any] = {"retry.backoff.ms": 10, "retry.backoff.max.ms": 100,
                                      "queue.buffering.max.messages": 500_000,
                                      "linger.ms": 5,
                                      "transaction.timeout.ms": DEFAULT_TRANSACTION_TIMEOUT_MS,
                                      "metadata.recovery.strategy": "none"}


@dataclass(frozen=True)
class Fenced:
    """What the fence's thread found: when init_transactions returned, and T1 read right
    after it (stable: nobody else can commit the task's offsets now), or the error of
    that lookup (a timeout: the activation takes the void-commit path)."""

    at: float
    committed: dict[str, int] | None
    error: KafkaException | None
    t1_at: float
    others: dict[str, int] = field(default_factory=dict)   # T1 of the replay's other sources


class Fencer:
    """The producers of the tasks on their way here, and their fences.

    Args:
        config: the job's configuration (the producers' settings).
        group: the job's consumer group; a task's transactional id is `<group>.<task>`.
        lookups: the committed offsets (T1).
        clock: the fence's retry deadline.
    """

    def __init__(self, config: Config, group: str, lookups: Lookups, clock: Clock) -> None:
        self._group = group
        self._lookups = lookups
        self._clock = clock
        self._producer_settings = {k: v for k, v in producer_settings(config.kafka_settings())
                                   .items() if not k.startswith("receive.message")}
        # connected, not yet fencing: each with its connection attempt on the pool
        self._prepared: dict[str, tuple[WatchedProducer, Future[Any]]] = {}
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="baton-fence")

    def start(self, task: str, partitions: Sequence[str], others: Sequence[str]
              ) -> tuple[WatchedProducer, Future[Fenced]]:
        """Fence the previous owner of `task` with its prepared producer (or a new one),
        then read T1 of `partitions` and of `others`, beside the loop."""
        prepared = self._prepared.pop(task, None)
        producer = prepared[0] if prepared else self._producer(task)
        return producer, self._pool.submit(self._fence, producer, list(partitions),
                                           list(others))

    def _fence(self, producer: WatchedProducer, partitions: list[str],
               others: list[str]) -> Fenced:
        """Fence and read T1 (`_fence_and_read_t1`), then T1 of the `others` the replay
        reads, retried as any lookup is (another owner's: no void commit of this task's
        can hold them, but an open transaction of theirs can, until it ends)."""
        fenced = self._fence_and_read_t1(producer, partitions)
        if not others or fenced.committed is None:
            return fenced
        return replace(fenced, others=self._lookups.committed(others))

    def _fence_and_read_t1(self, producer: WatchedProducer, partitions: list[str]) -> Fenced:
        """init_transactions, again while the brokers answer that they cannot yet (a
        transaction coordinator loading its log after a restart, or still completing
        the previous owner's transaction), within `_INIT_TXN_TIMEOUT_S` in all; then one
        stable lookup of T1."""
        deadline = Deadline.after(self._clock, _INIT_TXN_TIMEOUT_S)
        while True:
            try:
                producer.init_transactions(max(1.0, deadline.remaining()))
                at = self._clock.monotonic()
                try:
                    committed = self._t1_after_fence(partitions)
                except KafkaException as exc:
                    return Fenced(at, None, exc, self._clock.monotonic())
                return Fenced(at, committed, None, self._clock.monotonic())
            except KafkaException as exc:
                err = kafka_error(exc)
                if err is None or err.code() not in _FENCE_AGAIN or deadline.expired():
                    raise
            self._clock.sleep(0.1)

    def _t1_after_fence(self, partitions: list[str]) -> dict[str, int]:
        """One stable lookup of T1; after any failure but its timeout (the group's
        coordinator moving: a broker killed or restarting), the lookup retried as any
        lookup is, here on the fence's thread: on the loop it would hold every other
        task and the heartbeats' replies for as long (up to a minute and a half)."""
        lookups = self._lookups
        try:
            return lookups.committed_once(partitions, STABLE_T1_WAIT_S)
        except KafkaException as exc:
            err = kafka_error(exc)
            if err is not None and err.code() == KafkaError._TIMED_OUT:
                raise           # pending past the wait: a void commit
        return lookups.committed(partitions)

    def _producer(self, task: str) -> WatchedProducer:
        return WatchedProducer({**_PRODUCER_DEFAULTS, **self._producer_settings,
                                **client_logging("processor.producer"),
                                "transactional.id": f"{self._group}.{task}"})

    def prepare(self, task: str) -> None:
        """Connect a future owner's producer ahead of time (without fencing anyone):
        init_transactions on a cold producer can wait on librdkafka's 500 ms PID timer
        for the coordinator connection, and that wait would sit inside the pause."""
        if task not in self._prepared:
            producer = self._producer(task)
            self._prepared[task] = (
                producer, self._pool.submit(producer.list_topics, None, 10))

    def forget(self, task: str) -> None:
        """The task will not come here after all: close its prepared producer."""
        prepared = self._prepared.pop(task, None)
        if prepared is not None:
            close_when_done(*prepared)

    def close(self) -> None:
        """Close the prepared producers, stop fencing."""
        for prepared in self._prepared.values():
            close_when_done(*prepared)
        self._prepared.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)


def close_when_done(producer: WatchedProducer, call: Future[Any]) -> None:
    """Close `producer` once `call`, a call on it on the fencer, has returned (or at
    once if it never started): closing a client while a call runs on it is not safe."""
    call.add_done_callback(lambda _: close_producer(producer))


class StoreAheadError(Exception):
    """A store claims to have applied records the owner never committed: refuse it."""


@dataclass
class Activation:
    """A task on its way to active: fencing, then replaying T2 -> T1."""

    store: Store
    producer: WatchedProducer
    started: float
    fenced: Future[Fenced]
    replaying: bool = False
    # T1 as read once the fence was up: final, nobody else can commit the task's offsets
    committed: dict[str, int] = field(default_factory=dict)
    others: dict[str, int] = field(default_factory=dict)    # T1 of the replay's other sources
    steps: deque[ReplayStep] = field(default_factory=deque)   # the replays still to run
    last: Replay | None = None          # the latest replay: caught up, it goes active
    resettled: bool = False             # T1 was settled past a void commit (module doc)
    voided: bool = False                # the task's store applied a commit now void
    # the ends of its steps so far (processor/handoff_steps.py)
    stamps: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplayStep:
    """One silent replay of an activation: how to build it on the task's store, and
    what to log of the records it has to apply (the task, their count)."""

    build: Callable[[Store, ReplicaRole], Replay]
    announce: Callable[[str, int], None]


class Activations:
    """The activations in progress; `fencer` holds the producers of future ones.

    Args:
        config: the job's configuration (producer settings, output and error policy).
        group: the job's consumer group; a task's transactional id is `<group>.<task>`.
        jobs: the tasks' job instances (the new active task runs its own).
        consumers: the runtime's consumers (committed offsets, group metadata).
        stores: the task stores (a store ahead of a resettled T1 is replaced).
        metrics: where the new active task counts the records process() failed on.
        clock: stamps when an activation began (the start of the handoff pause).
    """

    def __init__(self, config: Config, group: str, jobs: TaskJobs, consumers: Consumers,
                 stores: TaskStores, metrics: ProcessorMetrics, clock: Clock) -> None:
        self._config = config
        self._jobs = jobs
        self._consumers = consumers
        self._stores = stores
        self._metrics = metrics
        self._clock = clock
        self.fencer = Fencer(config, group, consumers.lookups, clock)
        self.pending: dict[str, Activation] = {}
        self._voided: set[str] = set()      # tasks whose next activation settles (`voided`)
        self._metadata_of: object = None        # the consumer `_metadata` came from
        self._metadata: object = None

    def __contains__(self, task: object) -> bool:
        return task in self.pending

    def voided(self, task: str) -> None:
        """`task`'s store here applied a commit the brokers no longer hold
        (processor/transaction.py, `CommitVoided`): its next activation settles the
        task's partitions as after a void commit, and rebuilds a store ahead of them."""
        self._voided.add(task)

    def begin(self, task: str, store: Store, partitions: Sequence[str],
              sources: Sequence[str] = ()) -> None:
        """Start fencing the previous owner of `task`, then reading T1 of `partitions`
        and of the other `sources` its replay reads (a split child's ancestors, an
        expansion child's parent), beside the loop: a source another owner's open
        transaction holds answers only once that transaction ends."""
        started = self._clock.monotonic()
        others = [p for p in sources if p not in partitions]
        producer, fenced = self.fencer.start(task, partitions, others)
        self.pending[task] = Activation(store, producer, started, fenced,
                                        voided=task in self._voided,
                                        stamps={"began": started})
        self._voided.discard(task)

    def fenced(self) -> Iterator[str]:
        """The tasks whose fencing finished and whose replay has not started (checked
        lazily, one task at a time, so the caller may act on each as it comes)."""
        for task, activation in list(self.pending.items()):
            if not activation.replaying and activation.fenced.done():
                yield task

    def verify_fenced(self, task: str, partitions: Sequence[str],
                      changelog: ChangelogTarget | None = None
                      ) -> tuple[dict[str, int], dict[str, int]]:
        """After the fence: the committed offsets (T1) and the store's applied ones (T2);
        `changelog`: the task's changelog partition, if it writes one.

        Raises:
            StoreAheadError: the store has applied records past T1.
            FenceRefused: init_transactions was refused for good (the transaction
                timeout above the broker's limit, no WRITE on the transactional id).
            Exception: whatever else init_transactions raised (fenced, fatal, broker error).
        """
        activation = self.pending[task]
        try:
            fenced = activation.fenced.result()      # raises what init_transactions raised
        except KafkaException as exc:
            refused = fence_refused(self._config, task, exc)     # a limit or an ACL: say so
            if refused is not None:
                raise refused from exc
            raise
        activation.stamps["fence"] = fenced.at
        committed = self._stable_t1(task, activation, partitions, changelog, fenced)
        activation.stamps["t1"] = fenced.t1_at if fenced.committed is not None \
            else self._clock.monotonic()
        if activation.voided and not activation.resettled:
            self._resettle(activation, changelog, committed)
        applied = activation.store.applied_offsets()
        ahead = {p: (applied[p], committed[p]) for p in partitions
                 if applied.get(p, -1) > committed[p]}
        if ahead and activation.resettled:
            activation.store = self._stores.replace(
                task, activation.store, f"it had applied a void commit (store, T1): {ahead}")
            applied, ahead = {}, {}
        store = activation.store
        if ahead:
            raise StoreAheadError(
                f"task {task!r}: store {store.path} has applied offsets past the committed "
                f"ones (partition: (store, committed)) {ahead}; was the input topic recreated? "
                f"Move the store away to rebuild it from the input")
        activation.committed = dict(committed)
        activation.others = fenced.others
        return committed, applied

    def _stable_t1(self, task: str, activation: Activation, partitions: Sequence[str],
                   changelog: ChangelogTarget | None, fenced: Fenced) -> dict[str, int]:
        """T1, stable (as the fence's thread read it); past a void commit, settled and
        committed again (module doc)."""
        lookups = self._consumers.lookups
        if fenced.committed is not None and set(partitions) <= fenced.committed.keys():
            return {p: fenced.committed[p] for p in partitions}
        if fenced.error is None:
            return lookups.committed(partitions)    # the task's partitions changed meanwhile
        err = kafka_error(fenced.error)
        if err is None or err.code() != KafkaError._TIMED_OUT:
            raise fenced.error      # retried on the fence's thread already: the task fails
        settled = lookups.settled(partitions)
        log.error("task %r: the group's offsets stayed pending %.0f s after the fence: the "
                  "brokers ended a transaction of this task without writing its markers; "
                  "aborting its records and committing the settled offsets %s",
                  task, STABLE_T1_WAIT_S, settled)
        self._resettle(activation, changelog, settled)
        return settled

    def _resettle(self, activation: Activation, changelog: ChangelogTarget | None,
                  offsets: dict[str, int]) -> None:
        """Close what a void commit left open in the task's partitions, commit `offsets`
        in its place (processor/transaction.py `resettle`); the store must not lead them."""
        config = self._config
        dlq = dlq_topic(config.job.name) if config.processor.on_error == "dlq" else None
        resettle(activation.producer, written_topics(config.job.output, config.job.outputs,
                                                     dlq), changelog, offsets,
                 self._group_metadata())
        activation.resettled = True

    def _group_metadata(self) -> object:
        """The group's metadata for a transaction's offsets, from the active consumer
        of the moment (a cut-off one is replaced: processor/runtime/cut_off.py). An
        assigning consumer's never changes, so it is asked once per consumer: every
        commit of every task needs it, and each answer is a new object from librdkafka
        (about a twentieth of a busy processor's Python time, docs/performance.md)."""
        consumer = self._consumers.active.consumer
        if self._metadata_of is not consumer:
            self._metadata = consumer.consumer_group_metadata()
            self._metadata_of = consumer
        return self._metadata

    def _stable_t1_once(self, partitions: list[str]) -> dict[str, int]:
        """One stable lookup of T1, as an active task checks a commit after a broker loss:
        it waits for a commit's markers; one that never settles raises (a void commit)."""
        return self._consumers.lookups.committed_once(partitions, STABLE_T1_WAIT_S)

    def committed(self, task: str, partitions: Sequence[str]) -> dict[str, int]:
        """T1 of `partitions` for `task`'s activation, as the fence's thread read it:
        the task's own (final: the previous owner is fenced) and its replay's other
        sources (a split child's ancestors, an expansion child's parent). One the model
        added since is looked up here, on the loop, inside the handoff pause."""
        activation = self.pending[task]
        known = {**activation.others, **activation.committed}
        missing = [p for p in partitions if p not in known]
        found = self._consumers.lookups.committed(missing) if missing else {}
        return {p: known[p] if p in known else found[p] for p in partitions}

    def replay(self, task: str, steps: Sequence[ReplayStep]) -> Replay | None:
        """Start the silent replays that precede processing with output, in order: the
        first with records to apply, or None when all are caught up already."""
        activation = self.pending[task]
        activation.steps = deque(steps)
        activation.replaying = True
        return self.next_replay(task)

    def next_replay(self, task: str) -> Replay | None:
        """The next replay with records to apply (announced), or None: all are caught
        up, the task goes active."""
        activation = self.pending[task]
        while activation.steps:
            step = activation.steps.popleft()
            activation.last = replay = step.build(activation.store, "activating")
            if not replay.caught_up():
                step.announce(task, replay.lag())
                return replay
        return None

    def go_active(self, task: str, partitions: Sequence[str],
                  changelog: ChangelogWriter | None = None) -> ActiveTask:
        """The caught-up replay's store and the fenced producer, processing `partitions`
        (a split child's ancestors stay behind) from T1, writing its state changes to
        `changelog` (catch_up.source = "changelog")."""
        activation = self.pending.pop(task)
        replay = activation.last
        if replay is None:
            raise RuntimeError(f"task {task!r}: go_active before any replay")
        replay.commit()
        config = self._config
        effects = AfterCommit()
        job = self._jobs.get(replay.name, "active", partitions, effects)
        active = ActiveTask(replay.name, list(partitions), job, replay.store,
                            activation.producer, config.job.output, dlq_topic(config.job.name),
                            config.processor.on_error,
                            self._group_metadata,
                            {p: replay.caps[p] for p in partitions},
                            self._stable_t1_once, clock=self._clock,
                            changelog=changelog, outputs=config.job.outputs,
                            effects=effects)
        active.activated_at = activation.started
        active.stamps = {**activation.stamps, "replay": self._clock.monotonic()}
        active.on_process_error = self._metrics.record_process_error
        active.on_effect_error = self._metrics.record_effect_error
        active.transaction.on_voided = self.voided
        return active

    def abandon(self, task: str, close_store: bool) -> None:
        """`task`'s activation failed: drop it, with its producer (and its store, unless
        a replica's store that is closed with the replica)."""
        activation = self.pending.pop(task, None)
        if activation is not None:
            if close_store:
                activation.store.close()
            close_when_done(activation.producer, activation.fenced)

    def close(self, replicas: Container[str]) -> None:
        """Abandon every activation: close the stores no replica holds, stop fencing."""
        for task, activation in list(self.pending.items()):
            if task not in replicas:
                activation.store.close()
            close_when_done(activation.producer, activation.fenced)
        self.pending.clear()
        self.fencer.close()
