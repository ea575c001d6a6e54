"""Deletes a compacted changelog may have forgotten since a store last read it.

Apache Kafka's log cleaner keeps a tombstone (a delete) for `delete.retention.ms` after
it first cleans the tombstone's segment, then drops it: a reader that has not read
past it by then never learns of the delete. A store that comes back to a changelog
partition at its checkpoint C (a warmup returning, a standby or an owner restarting)
would then keep keys the owner deleted. No tombstone written less than
`delete.retention.ms` ago can be gone yet, so resuming at C is safe when every record
from C on is younger than that; otherwise the store is cleared and rebuilt from the
partition's start, which compaction keeps complete (a new replica's read is right by
construction: what compaction dropped it never held).

The check is one ListOffsets by time (the first offset written at or after `now -
delete.retention.ms`); the topic's `delete.retention.ms` is read once (DescribeConfigs),
Kafka's default of a day when the broker will not say. Record timestamps are the
producers' (CreateTime), set before the broker appends them, so a record is never
taken for younger than it is, clock skew between hosts aside.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from orchestrator.kafka.logs import client_logging
from orchestrator.kafka.settings import producer_settings
from orchestrator.wire.clock import Clock
from orchestrator.wire.partitions import split_partition

__all__ = ["DEFAULT_DELETE_RETENTION_MS", "TombstoneHorizon"]

log = logging.getLogger("baton.processor.runtime")

DEFAULT_DELETE_RETENTION_MS = 86_400_000      # Kafka's log.cleaner.delete.retention.ms
_TIMEOUT_S = 10.0


class TombstoneHorizon:
    """Whether a store at a changelog position may have missed dropped tombstones.

    Args:
        settings: librdkafka settings of the cluster.
        topic: the job's changelog topic.
        clock: its wall time is the "now" the retention counts back from.
    """

    def __init__(self, settings: dict[str, object], topic: str, clock: Clock) -> None:
        self._settings = settings
        self._topic = topic
        self._clock = clock
        self._retention_ms: int | None = None

    def retention_ms(self) -> int:
        """The topic's `delete.retention.ms` (read once)."""
        if self._retention_ms is None:
            self._retention_ms = self._describe()
        return self._retention_ms

    def _describe(self) -> int:
        admin = AdminClient({**producer_settings(self._settings),
                             **client_logging("processor.admin")})
        resource = ConfigResource(ConfigResource.Type.TOPIC, self._topic)
        try:
            entry = admin.describe_configs([resource])[resource].result(_TIMEOUT_S).get(
                "delete.retention.ms")
        except KafkaException as exc:
            log.warning("cannot read delete.retention.ms of %s (%s): taking Kafka's default "
                        "of %d ms", self._topic, exc, DEFAULT_DELETE_RETENTION_MS)
            return DEFAULT_DELETE_RETENTION_MS
        return int(entry.value) if entry is not None and entry.value is not None \
            else DEFAULT_DELETE_RETENTION_MS

    def may_have_lost_deletes(self, consumer: Consumer, partition: str, position: int,
                              end: int) -> bool:
        """True when some record of `partition` in [position, end) was written longer
        than `delete.retention.ms` ago (a tombstone among them may be gone).

        Raises:
            KafkaException: the lookup failed (the caller's task fails; a retry may pass).
        """
        if position >= end:
            return False
        since = int(self._clock.time() * 1000) - self.retention_ms()
        topic, number = split_partition(partition)
        found = consumer.offsets_for_times([TopicPartition(topic, number, since)],
                                           timeout=_TIMEOUT_S)[0]
        if found.error is not None:
            raise KafkaException(found.error)
        # -1: no record that young at all, so those from `position` on are all older
        first_young = int(found.offset)
        return first_young < 0 or first_young > position
