"""The catch-up source (`catch_up.source`): where a replica rebuilds a task's state from.

One concept, two implementations, each owning what differs between them:

- `InputCatchUp` ("input"): a replica replays the task's input through process()
  (processor/replica.py), capped at the owner's committed offsets (T1); an activation
  replays T2 -> T1.
- `ChangelogCatchUp` ("changelog"): a replica applies the task's changelog partition
  (processor/changelog_replica.py), which the coordinator maps with the job model
  (orchestrator/core/changelog.py); an activation applies it to its committed end (final
  once the previous owner is fenced), then replays whatever input the changelog does
  not reach (a changelog that began after the store's history), and the active task
  writes its state changes there (processor/changelog.py).

What differs: the replica a warmup or standby runs, whether its store is read, the
bulk plan of a fresh store (processor/runtime/bulk_path.py), the replays of an
activation in their order, how the caps (and so the lag) follow the owner, whether
replays take small bites before an activation, what a fetch below the broker's first
offset means, the active task's changelog writer. The runtime asks; it does not branch
on the source.
"""

from __future__ import annotations

import functools
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence

from confluent_kafka import KafkaException

from orchestrator.wire.changelog import changelog_topic
from orchestrator.wire.clock import Clock
from orchestrator.wire.config import Config
from processor.changelog import ChangelogTarget, ChangelogWriter
from processor.changelog_replica import ChangelogError, ChangelogReplica
from processor.replica import Replay, Replica, ReplicaRole
from processor.retention import InputTrimmedError, OffsetOutOfRange, check_retained
from processor.runtime.activation import Activations, ReplayStep
from processor.runtime.barriers import BarrierBook
from processor.runtime.bulk_path import BulkPlan, changelog_bulk_plan, input_bulk_plan
from processor.runtime.jobs import TaskJobs
from processor.runtime.lookups import Lookups
from processor.runtime.task_partitions import TaskPartitions
from processor.runtime.tombstones import TombstoneHorizon
from store import Store

__all__ = ["CatchUp", "ChangelogCatchUp", "InputCatchUp", "catch_up_source"]

log = logging.getLogger("baton.processor.runtime")

_CAP_LOOKUP_TIMEOUT_S = 2.0   # a refresh of the caps that cannot answer this fast is skipped

# after a replay batch: settle a replica's position past what its consumer read
Settle = Callable[[Replay], None]


def _settle_nothing(replica: Replay) -> None:
    """An input replica's position is where its last record was applied."""


class CatchUp(ABC):
    """A catch-up source, as the task runtime asks it."""

    #: a replica reads its store (process() does); a changelog apply only writes it
    reads_store = True

    def update(self, mapping: Mapping[str, int], generation: int | None) -> None:
        """A new job model arrived with this task -> changelog partition mapping (the
        input source has no use for it)."""
        return None

    @abstractmethod
    def partitions(self, task: str) -> list[str]:
        """The partitions a replica of `task` reads, in order."""

    @abstractmethod
    def replica(self, task: str, store: Store, role: ReplicaRole) -> Replay:
        """A warmup or standby of `task` on `store`, positioned from it."""

    @abstractmethod
    def bulk_plan(self, replica: Replay) -> BulkPlan | None:
        """What Spark should catch a fresh replica up over, if its backlog is large."""

    @abstractmethod
    def activation_steps(self, task: str) -> list[ReplayStep]:
        """The silent replays of an activation, in order, once the fence is up."""

    def writer(self, task: str, store: Store) -> ChangelogWriter | None:
        """What the active task writes its state changes to (None: nothing)."""
        return None

    def changelog_of(self, task: str) -> ChangelogTarget | None:
        """The changelog partition `task`'s transactions write (None: none)."""
        return None

    @abstractmethod
    def refresh_caps(self, replicas: Sequence[Replay]) -> Sequence[Replay]:
        """New caps for the warmups and standbys `replicas`; returns those whose caps
        may let them read on."""

    def settler(self, replicas: Sequence[Replay]) -> Settle:
        """Before a replay batch is applied: what settles each replica after it."""
        return _settle_nothing

    @abstractmethod
    def replays_input(self, replicas: Collection[Replay]) -> bool:
        """Whether some of `replicas` replay the input through process(): then a
        replay batch beside an activation takes small bites (replay_round.replay_bite)."""

    @abstractmethod
    def out_of_range(self, task: str, replica: Replay,
                     exc: OffsetOutOfRange) -> Exception:
        """The error `task`'s `replica` fails with when its fetch fell outside what the
        broker holds."""


class InputCatchUp(CatchUp):
    """Replicas replay the input through process() (catch_up.source = "input").

    Args:
        config: the job's configuration (`catch_up.bulk_threshold`).
        tasks: what each task reads.
        lookups: committed offsets and watermarks.
        jobs: each task's job instance.
        barrier_book: gives each replica its expansion reroutes.
        activations: T1 as read once an activation's fence was up.
        clock: paces the replicas' rates.
    """

    def __init__(self, config: Config, tasks: TaskPartitions, lookups: Lookups,
                 jobs: TaskJobs, barrier_book: BarrierBook, activations: Activations,
                 clock: Clock) -> None:
        self._threshold = config.catch_up.bulk_threshold
        self._tasks = tasks
        self._lookups = lookups
        self._jobs = jobs
        self._barrier_book = barrier_book
        self._activations = activations
        self._clock = clock

    def partitions(self, task: str) -> list[str]:
        return self._tasks.sources(task).partitions

    def replica(self, task: str, store: Store, role: ReplicaRole) -> Replica:
        partitions = self._tasks.sources(task).partitions
        return self._replica(task, store, role, self._start_caps(task, partitions))

    def _start_caps(self, task: str, partitions: list[str]) -> dict[str, int]:
        """T1 to cap a new warmup or standby at, without holding the loop: a stable
        lookup waits while an offset commit of the group is pending (an owner's
        transaction ending, or one a broker restart left unsettled, for minutes on
        Apache Kafka), and the loop would wait with it, every other task's commits and
        a release's deadline too. So one short attempt, then the settled offsets: they
        never pass T1 (a pending commit is left out), and the caps' refresh raises them
        once T1 is stable."""
        try:
            return self._lookups.committed_once(partitions, _CAP_LOOKUP_TIMEOUT_S)
        except KafkaException as exc:
            log.info("task %r: its committed offsets are not stable yet (%s); it starts "
                     "capped at the settled ones", task, exc)
            return self._lookups.settled(partitions)

    def _replica(self, task: str, store: Store, role: ReplicaRole,
                 committed: Mapping[str, int]) -> Replica:
        """A replica of `task` positioned from its store, capped at `committed` (T1)."""
        sources = self._tasks.sources(task)
        applied = store.applied_offsets()
        positions = {p: applied[p] if p in applied else self._lookups.low_watermark(p)
                     for p in sources.partitions}     # a lookup only when the store lacks it
        caps = {p: sources.cap(p, max(committed[p], 0)) for p in sources.partitions}
        # a checkpoint below the broker's first offset: the records between are gone
        check_retained(task, {p: applied[p] for p in sources.partitions if p in applied},
                       caps, self._lookups.low_watermark)
        job = self._jobs.get(task, role, self._tasks.of(task))
        replica = Replica(task, sources.partitions, job, store, role, positions, caps,
                          sources.filters, sources.gates, clock=self._clock)
        self._barrier_book.attach(replica)
        return replica

    def bulk_plan(self, replica: Replay) -> BulkPlan | None:
        return input_bulk_plan(replica, self._threshold)

    def activation_steps(self, task: str) -> list[ReplayStep]:
        return [self.input_step(task, _announce_input_replay)]

    def input_step(self, task: str, announce: Callable[[str, int], None]) -> ReplayStep:
        """Replay the input T2 -> T1 (T1 as the fence left it), telling `announce` the
        records to replay."""
        def build(store: Store, role: ReplicaRole) -> Replay:
            sources = self._tasks.sources(task).partitions
            return self._replica(task, store, role,
                                 self._activations.committed(task, sources))
        return ReplayStep(build, announce)

    def refresh_caps(self, replicas: Sequence[Replay]) -> Sequence[Replay]:
        """Warmups and standbys follow the owner's committed offsets as they advance (a
        split child's ancestors no further than their barriers)."""
        following = [r for r in replicas if r.source == "input"]
        partitions = [p for r in following for p in r.partitions]
        if not partitions:
            return []
        try:
            caps = self._lookups.committed_once(partitions, _CAP_LOOKUP_TIMEOUT_S)
        except KafkaException as exc:       # keep the old caps; the next refresh retries
            log.debug("replica caps not refreshed: %s", exc)
            return []
        for replica in following:
            ends = self._tasks.sources(replica.name).ends
            replica.caps = {p: min(caps[p], ends.get(p, caps[p])) for p in replica.partitions}
        return following

    def replays_input(self, replicas: Collection[Replay]) -> bool:
        """Every replica of this source replays the input."""
        return bool(replicas)

    def out_of_range(self, task: str, replica: Replay,
                     exc: OffsetOutOfRange) -> Exception:
        """Below the broker's first offset: retention trimmed input the replay still
        needed (InputTrimmedError names it); past it, the fetch's own error."""
        first = self._lookups.low_watermark(exc.partition)
        if first > exc.offset:
            return InputTrimmedError(exc.partition, exc.offset, first, task)
        return exc


def _announce_input_replay(task: str, lag: int) -> None:
    log.info("task %r: replaying %d records before going active", task, lag)


def _announce_input_after_changelog(task: str, lag: int) -> None:
    log.warning("task %r: the changelog does not reach the committed input offsets: "
                "replaying %d input records through process() (did the job switch "
                "to the changelog source?)", task, lag)


def _announce_changelog(task: str, lag: int) -> None:
    log.info("task %r: applying %d changelog records before going active", task, lag)


class ChangelogCatchUp(CatchUp):
    """Replicas apply the task's changelog partition (catch_up.source = "changelog").

    Args:
        config: the job's configuration (`changelog_read_from`, `bulk_threshold`).
        tasks: what each task reads.
        lookups: the changelog partition's bounds.
        read_through: how far the replay consumers have read each partition.
        inputs: the input replay an activation falls back on for what the changelog
            does not reach.
        clock: paces the replicas' rates.
    """

    reads_store = False

    def __init__(self, config: Config, tasks: TaskPartitions, lookups: Lookups,
                 read_through: Callable[[Sequence[str]], dict[str, int]],
                 inputs: InputCatchUp, clock: Clock) -> None:
        self._config = config
        self._tasks = tasks
        self._lookups = lookups
        self._read_through = read_through
        self._inputs = inputs
        self._clock = clock
        self.mapping: dict[str, int] = {}      # task -> partition, from the job model
        self.generation: int | None = None
        # deletes a store away too long may have missed (processor/runtime/tombstones.py)
        self._horizon = TombstoneHorizon(config.kafka_settings(),
                                         changelog_topic(config.job.name), clock)

    def update(self, mapping: Mapping[str, int], generation: int | None) -> None:
        self.mapping, self.generation = dict(mapping), generation

    def partitions(self, task: str) -> list[str]:
        """Its changelog partition (none while the model maps it nowhere)."""
        number = self.mapping.get(task)
        return [] if number is None else [self._target(number).name]

    def target(self, task: str) -> ChangelogTarget:
        """`task`'s changelog partition.

        Raises:
            ChangelogError: the model the coordinator sent maps it nowhere.
        """
        number = self.mapping.get(task)
        if number is None:
            raise ChangelogError(
                f"task {task!r}: catch_up.source = \"changelog\" in {self._config.path}, "
                f"but the coordinator's job model (generation {self.generation}) gives it "
                f"no changelog partition: run the coordinator with the same catch_up.source")
        return self._target(number)

    def _target(self, number: int) -> ChangelogTarget:
        return ChangelogTarget.of(self._config.job.name, number)

    def replica(self, task: str, store: Store, role: ReplicaRole) -> ChangelogReplica:
        """A replica of `task` applying its partition from the store's position (a store
        that never followed it: from the partition's start), capped at its committed end.

        Raises:
            ChangelogError: no partition for the task, or the store is past its end.
        """
        target = self.target(task)
        low, end = self._lookups.bounds(target.name)
        position = store.applied_offsets().get(target.name)
        if position is not None and position > end:
            raise ChangelogError(
                f"task {task!r}: store {store.path} has applied {target.name} up to "
                f"{position}, past its committed end {end}: was the changelog topic "
                f"recreated? Move the store away to rebuild it from the changelog")
        if position is not None and self._horizon.may_have_lost_deletes(
                self._lookups.consumer, target.name, position, end):
            log.warning("task %r: store %s is at %s offset %d, and records after it are "
                        "older than the topic's delete.retention.ms (%d ms): deletes may "
                        "have been compacted away since; rebuilding it from the start",
                        task, store.path, target.name, position,
                        self._horizon.retention_ms())
            store.clear()
            position = None
        position = low if position is None else max(position, low)
        fetch_from = low if self._config.catch_up.changelog_read_from == "beginning" \
            else position
        return ChangelogReplica(task, target.name, self._tasks.of(task), store, role,
                                position, end, fetch_from, clock=self._clock)

    def bulk_plan(self, replica: Replay) -> BulkPlan | None:
        return changelog_bulk_plan(replica, self._config.catch_up.bulk_threshold)

    def activation_steps(self, task: str) -> list[ReplayStep]:
        """The changelog to its committed end (final: the previous owner is fenced),
        which brings the store's input offsets to T1 as well; then the input from there
        (usually nothing)."""
        return [ReplayStep(functools.partial(self.replica, task), _announce_changelog),
                self._inputs.input_step(task, _announce_input_after_changelog)]

    def writer(self, task: str, store: Store) -> ChangelogWriter:
        """The changelog writer of `task` going active on `store` (which snapshots the
        store first when it never followed the partition).

        Raises:
            ChangelogError: no partition for the task.
        """
        target = self.target(task)
        return ChangelogWriter(target, snapshot_due=target.name not in store.applied_offsets())

    def changelog_of(self, task: str) -> ChangelogTarget:
        return self.target(task)

    def refresh_caps(self, replicas: Sequence[Replay]) -> Sequence[Replay]:
        """A changelog replica is never capped (all it reads has committed): its cap is
        the partition's committed end, for its lag."""
        following = [r for r in replicas if r.source == "changelog"]
        if not following:
            return []
        try:
            ends = self._lookups.ends_once([p for r in following for p in r.partitions],
                                           _CAP_LOOKUP_TIMEOUT_S)
        except KafkaException as exc:       # keep the old ends; the next refresh retries
            log.debug("changelog ends not refreshed: %s", exc)
            return []
        for replica in following:
            replica.caps = {p: ends[p] for p in replica.partitions}
        return []

    def replays_input(self, replicas: Collection[Replay]) -> bool:
        """Only an activation's input replay after the changelog does."""
        return any(r.source == "input" for r in replicas)

    def out_of_range(self, task: str, replica: Replay,
                     exc: OffsetOutOfRange) -> Exception:
        """A changelog apply's fetch fails with its own error; an activation's input
        replay after the changelog as the input source says."""
        if replica.source == "input":
            return self._inputs.out_of_range(task, replica, exc)
        return exc

    def settler(self, replicas: Sequence[Replay]) -> Settle:
        """A changelog replica's position moves past the transaction markers and aborted
        records its consumer has read past, so one at the end shows a lag of 0."""
        read = self._read_through([r.partitions[0] for r in replicas
                                   if isinstance(r, ChangelogReplica)])

        def settle(replica: Replay) -> None:
            if isinstance(replica, ChangelogReplica) and replica.partition in read:
                replica.settle(read[replica.partition])
        return settle


def catch_up_source(config: Config, tasks: TaskPartitions, lookups: Lookups,
                    read_through: Callable[[Sequence[str]], dict[str, int]],
                    jobs: TaskJobs, barrier_book: BarrierBook, activations: Activations,
                    clock: Clock) -> CatchUp:
    """The source `catch_up.source` names."""
    inputs = InputCatchUp(config, tasks, lookups, jobs, barrier_book, activations, clock)
    if config.catch_up.source == "changelog":
        return ChangelogCatchUp(config, tasks, lookups, read_through, inputs, clock)
    return inputs
