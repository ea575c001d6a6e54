"""Partition names and offset lookups at the Kafka edge.

Partitions are written "topic:N" everywhere in Baton; offsets are Kafka's "next
offset to read". A partition with no committed offset starts at its low watermark
(the earliest retained record), as a new job or a trimmed log needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import OFFSET_END, Consumer, KafkaException, TopicPartition
from tenacity import retry

from orchestrator.kafka.retry import KAFKA_RETRY
from orchestrator.wire.partitions import format_partition, split_partition

__all__ = ["committed_offsets", "committed_once", "end_offsets_once", "refresh_metadata",
           "to_topic_partitions", "watermarks"]

_LOOKUP_TIMEOUT_S = 10.0
_KAFKA_RETRY = retry(retry=KAFKA_RETRY["retry"], stop=KAFKA_RETRY["stop"],
                     wait=KAFKA_RETRY["wait"], reraise=True)


def refresh_metadata(consumer: Consumer, partitions: Iterable[str]) -> None:
    """librdkafka caches metadata; after an expansion or a broker restart, ask for the
    topics again."""
    for topic in {split_partition(p)[0] for p in partitions}:
        try:
            consumer.list_topics(topic, timeout=_LOOKUP_TIMEOUT_S)
        except KafkaException:
            pass        # the retry that follows reports the real error


def to_topic_partitions(offsets: Mapping[str, int]) -> list[TopicPartition]:
    return [TopicPartition(*split_partition(p), offset) for p, offset in offsets.items()]


@_KAFKA_RETRY
def watermarks(consumer: Consumer, partition: str) -> tuple[int, int]:
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(*split_partition(partition)), timeout=_LOOKUP_TIMEOUT_S, cached=False)
    except KafkaException:
        refresh_metadata(consumer, [partition])
        raise
    return int(low), int(high)


@_KAFKA_RETRY
def committed_offsets(consumer: Consumer, partitions: Iterable[str]) -> dict[str, int]:
    """The group's committed offsets (T1); the low watermark where none is committed."""
    return committed_once(consumer, partitions, _LOOKUP_TIMEOUT_S)


def committed_once(consumer: Consumer, partitions: Iterable[str],
                   timeout: float) -> dict[str, int]:
    """One attempt, for callers that can simply try again later (replica caps)."""
    names = list(partitions)
    if not names:
        return {}
    found = consumer.committed([TopicPartition(*split_partition(p)) for p in names],
                               timeout=timeout)
    result: dict[str, int] = {}
    for tp in found:
        name = format_partition(tp.topic, tp.partition)
        if tp.error is not None:
            refresh_metadata(consumer, names)
            raise KafkaException(tp.error)
        result[name] = tp.offset if tp.offset >= 0 else watermarks(consumer, name)[0]
    return result


def end_offsets_once(consumer: Consumer, partitions: Iterable[str],
                     timeout: float) -> dict[str, int]:
    """Each partition's end, in one attempt; a read_committed consumer gets the last
    stable offset (the end of what has committed), not the high watermark.

    One lookup of the latest offset by time for all of them (librdkafka asks each
    leader once), where a watermark query per partition sends requests of its own for
    each: a processor's stall watch asks for every partition it reads, every look.

    Raises:
        KafkaException: a lookup failed (callers that poll simply try again later).
    """
    names = list(partitions)
    if not names:
        return {}
    found = consumer.offsets_for_times(
        [TopicPartition(*split_partition(name), OFFSET_END) for name in names],
        timeout=timeout)
    ends: dict[str, int] = {}
    for tp in found:
        if tp.error is not None:
            raise KafkaException(tp.error)
        ends[format_partition(tp.topic, tp.partition)] = int(tp.offset)
    return ends
