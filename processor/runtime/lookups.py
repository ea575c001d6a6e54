"""Offset lookups on a consumer of their own, one that reads nothing.

A broker answers one connection's requests in order, so a lookup on a reading consumer
waits behind its fetch, which may carry a whole backlog (a warmup's start and its cap
refreshes, in the main loop, waited ~250 ms behind one). Committed offsets (T1) and
watermarks are asked here.

Two answers to "what has the group committed?": the stable one (T1: a read_committed
lookup waits while a transaction's offset commit is pending) and the settled one (a
read_uncommitted lookup: the offsets that took effect, pending ones ignored). They
differ only while a transaction is ending, or when the brokers ended one without
writing its markers (processor/runtime/activation.py, "void commits").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

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
        consumer: a read_committed consumer of the job's group, never assigned.
        settled: makes a read_uncommitted consumer of the group (made on first use:
            few processors ever need it).
    """

    def __init__(self, consumer: Consumer, settled: Callable[[], Consumer]) -> None:
        self.consumer = consumer
        self._make_settled = settled
        self._settled: Consumer | None = None

    def committed(self, partitions: Iterable[str]) -> dict[str, int]:
        """The group's committed offsets (T1) of `partitions`."""
        return committed_offsets(self.consumer, partitions)

    def settled(self, partitions: Iterable[str]) -> dict[str, int]:
        """The group's offsets of `partitions` that took effect, any offset commit of a
        transaction still pending ignored (see the module doc)."""
        if self._settled is None:
            self._settled = self._make_settled()
        return committed_offsets(self._settled, partitions)

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

    def close(self) -> None:
        self.consumer.close()
        if self._settled is not None:
            self._settled.close()
