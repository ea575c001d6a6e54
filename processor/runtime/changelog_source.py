"""The task runtime's side of catch_up.source = "changelog": the model's mapping, the
replicas that apply a task's partition, the writers of active tasks.

The coordinator sends the task -> partition mapping with the job model
(orchestrator/core/changelog.py decides it); this module turns it into the objects the
runtime runs: a `ChangelogReplica` positioned from its store (processor/changelog_replica.py)
and a `ChangelogWriter` for an active task (processor/changelog.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from orchestrator.wire.changelog import changelog_topic
from orchestrator.wire.clock import Clock
from orchestrator.wire.config import Config
from processor.changelog import ChangelogTarget, ChangelogWriter
from processor.changelog_replica import ChangelogError, ChangelogReplica
from processor.replica import ReplicaRole
from processor.runtime.consumers import Consumers
from processor.runtime.tombstones import TombstoneHorizon
from store import Store

__all__ = ["ChangelogSource"]

log = logging.getLogger("baton.processor.runtime")


class ChangelogSource:
    """The changelog as one processor's runtime uses it.

    Args:
        config: the job's configuration (`catch_up.source`, `changelog_read_from`).
        consumers: the runtime's consumers (the partition's bounds).
        clock: paces the replicas' rates.
    """

    def __init__(self, config: Config, consumers: Consumers, clock: Clock) -> None:
        self._config = config
        self._consumers = consumers
        self._clock = clock
        self.enabled = config.catch_up.source == "changelog"
        self._horizon = TombstoneHorizon(config.kafka_settings(),
                                         changelog_topic(config.job.name))
        self.mapping: dict[str, int] = {}      # task -> partition, from the job model
        self.generation: int | None = None

    def update(self, mapping: Mapping[str, int], generation: int | None) -> None:
        """A new job model arrived with this mapping."""
        self.mapping, self.generation = dict(mapping), generation

    def partitions(self, task: str) -> list[str]:
        """What a replica of `task` reads: its partition (none while unmapped)."""
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

    def replica(self, task: str, inputs: Sequence[str], store: Store, role: ReplicaRole
                ) -> ChangelogReplica:
        """A replica of `task` applying its partition from the store's position (a store
        that never followed it: from the partition's start), capped at its committed end.

        Raises:
            ChangelogError: no partition for the task, or the store is past its end.
        """
        target = self.target(task)
        low, end = self._consumers.bounds(target.name)
        position = store.applied_offsets().get(target.name)
        if position is not None and position > end:
            raise ChangelogError(
                f"task {task!r}: store {store.path} has applied {target.name} up to "
                f"{position}, past its committed end {end}: was the changelog topic "
                f"recreated? Move the store away to rebuild it from the changelog")
        if position is not None and self._horizon.may_have_lost_deletes(
                self._consumers.lookup, target.name, position, end):
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
        return ChangelogReplica(task, target.name, inputs, store, role, position, end,
                                fetch_from, clock=self._clock)

    def writer(self, task: str, store: Store) -> ChangelogWriter:
        """The changelog writer of `task` going active on `store` (which snapshots the
        store first when it never followed the partition).

        Raises:
            ChangelogError: no partition for the task.
        """
        target = self.target(task)
        return ChangelogWriter(target, snapshot_due=target.name not in store.applied_offsets())
