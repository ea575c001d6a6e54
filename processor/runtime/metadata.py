"""Telling a consumer about partitions its cached metadata does not know yet.

librdkafka keeps each topic's partition count from its last metadata answer. A partition
assigned at or beyond that count is parked until the client's own refresh, which a 1 s
timer drives: after an expansion, a consumer that read the topic before waits up to the
timer's period before its first fetch of a new partition, where a metadata request for
the topic first brings the first record within milliseconds (docs/performance.md,
"Measurements behind the code"). That wait would sit inside a split
child's first handoff pause (its activation replays the child's partition on a consumer
that cached the old count), an embedded child's start and a child's warmup.

So before an assign, `PartitionCounts` asks for the topic's metadata once per consumer
and topic, and again only when a partition at or past the count it last saw is
assigned (after an expansion). An assign of partitions already known costs nothing,
which matters to the idle back-off's frequent re-assigns (processor/runtime/
idle_fetch.py).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition

__all__ = ["PartitionCounts"]

log = logging.getLogger("baton.processor.runtime")

# A request that has not answered by then is given up: librdkafka's own refresh (the
# fallback) comes within ~1 s anyway, so waiting longer could only delay the assign.
_METADATA_TIMEOUT_S = 1.0


class PartitionCounts:
    """The partition count each consumer's metadata was last told, per topic.

    Args:
        timeout_s: how long one metadata request may take.
    """

    def __init__(self, timeout_s: float = _METADATA_TIMEOUT_S) -> None:
        self._timeout_s = timeout_s
        self._counts: dict[tuple[int, str], int] = {}   # (id(consumer), topic) -> count

    def before_assign(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        """Refresh `consumer`'s metadata of each topic of which `partitions` names a
        partition it may not know, so the assign that follows fetches at once.

        A failed request is logged at debug level and left to librdkafka's own refresh.
        """
        highest: dict[str, int] = {}
        for tp in partitions:
            highest[tp.topic] = max(highest.get(tp.topic, -1), tp.partition)
        for topic, number in highest.items():
            if number < self._counts.get((id(consumer), topic), 0):
                continue
            try:
                meta = consumer.list_topics(topic, timeout=self._timeout_s).topics.get(topic)
            except KafkaException as exc:
                log.debug("metadata of %s not refreshed before an assign: %s", topic, exc)
                continue
            if meta is not None and meta.error is None:
                self._counts[(id(consumer), topic)] = len(meta.partitions)
