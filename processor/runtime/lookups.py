"""Offset lookups on a consumer of their own, one that reads nothing.

A broker answers one connection's requests in order, so a lookup on a reading consumer
waits behind its fetch, which may carry a whole backlog (a warmup's start and its cap
refreshes, in the main loop, waited ~250 ms behind one). Committed offsets (T1) and
watermarks are asked here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from confluent_kafka import Consumer

from orchestrator.kafka.offsets import (
    committed_offsets,
    committed_once,
    end_offsets_once,
    watermarks,
)

__all__ = ["Lookups"]


class Lookups:
    """The group's committed offsets and the partitions' bounds.

    Args:
        consumer: a consumer of the job's group, never assigned.
    """

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    def committed(self, partitions: Iterable[str]) -> dict[str, int]:
        """The group's committed offsets (T1) of `partitions`."""
        return committed_offsets(self.consumer, partitions)

    def committed_once(self, partitions: Sequence[str], timeout: float) -> dict[str, int]:
        """As `committed`, one attempt within `timeout` (raises KafkaException)."""
        return committed_once(self.consumer, partitions, timeout)

    def ends_once(self, partitions: Sequence[str], timeout: float) -> dict[str, int]:
        """The partitions' committed ends, one attempt within `timeout`."""
        return end_offsets_once(self.consumer, partitions, timeout)

    def low_watermark(self, partition: str) -> int:
        """The first offset the broker still holds on `partition`."""
        return watermarks(self.consumer, partition)[0]

    def bounds(self, partition: str) -> tuple[int, int]:
        """`partition`'s first offset and its committed end (the last stable offset:
        the replay consumer reads committed records only)."""
        return watermarks(self.consumer, partition)
