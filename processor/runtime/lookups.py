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

A stable lookup of a partition another processor commits waits while that processor's
transaction holds an offset commit pending, which a frozen or cut-off owner does until
its transaction times out. Such lookups, which the loop asks again and again (an
expansion barrier's parent), run beside the loop (`committed_soon`): the loop never
waits on another processor's transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from confluent_kafka import Consumer, KafkaException

from orchestrator.kafka.offsets import (
    committed_offsets,
    committed_once,
    end_offsets_once,
    watermarks,
)

__all__ = ["BESIDE_LOOKUP_S", "Lookups"]

# one attempt of a lookup beside the loop: a failed one is asked again at the next call,
# and closing the lookups waits for at most one
BESIDE_LOOKUP_S = 2.0


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
        self._beside: ThreadPoolExecutor | None = None      # made at its first need
        self._asked: dict[tuple[str, ...], Future[dict[str, int]]] = {}
        self._answers: dict[tuple[str, ...], dict[str, int]] = {}

    def committed(self, partitions: Iterable[str]) -> dict[str, int]:
        """The group's committed offsets (T1) of `partitions`."""
        return committed_offsets(self.consumer, partitions)

    def settled(self, partitions: Iterable[str]) -> dict[str, int]:
        """The group's offsets of `partitions` that took effect, any offset commit of a
        transaction still pending ignored (see the module doc)."""
        if self._settled is None:
            self._settled = self._make_settled()
        return committed_offsets(self._settled, partitions)

    def committed_soon(self, partitions: Sequence[str]) -> dict[str, int] | None:
        """The committed offsets (T1) of `partitions` as the last lookup of them, run
        beside the loop, answered; None until one has. Each call starts the next lookup
        once the last one is over (one that failed leaves the answer before it), so a
        caller that polls sees the offsets move, one lookup behind: committed offsets
        only grow, so an answer that is late is only cautious."""
        key = tuple(partitions)
        asked = self._asked.get(key)
        if asked is not None and asked.done():
            del self._asked[key]
            try:
                self._answers[key] = asked.result()
            except KafkaException:
                pass        # the next lookup tries again
        if key not in self._asked:
            if self._beside is None:
                self._beside = ThreadPoolExecutor(max_workers=1,
                                                  thread_name_prefix="baton-lookup")
            self._asked[key] = self._beside.submit(committed_once, self.consumer, key,
                                                   BESIDE_LOOKUP_S)
        return self._answers.get(key)

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
        if self._beside is not None:        # a lookup under way uses the consumer
            self._beside.shutdown(wait=True, cancel_futures=True)
        self.consumer.close()
        if self._settled is not None:
            self._settled.close()
