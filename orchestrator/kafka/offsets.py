"""Partition names and offset lookups at the Kafka edge.

Partitions are written "topic:N" everywhere in Baton; offsets are Kafka's "next
offset to read". A partition with no committed offset starts at its low watermark
(the earliest retained record), as a new job or a trimmed log needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

__all__ = ["committed_offsets", "committed_once", "parse_partition", "partition_name",
           "to_topic_partitions", "watermarks"]

_LOOKUP_TIMEOUT_S = 10.0
# a broker that restarts or elects a coordinator answers with retriable errors for a few
# seconds; beyond ~30 s something is really wrong and the caller must hear about it
_KAFKA_RETRY = retry(retry=retry_if_exception(lambda e: _retriable(e)),
                     stop=stop_after_attempt(8), wait=wait_exponential(multiplier=0.2, max=5),
                     reraise=True)


_STALE_METADATA = {KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART}


def _retriable(exc: BaseException) -> bool:
    if not isinstance(exc, KafkaException):
        return False
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError) and err.code() in _STALE_METADATA:
        return True         # a partition just added (expansion): metadata catches up
    return bool(getattr(err, "retriable", lambda: False)()) or "timed out" in str(exc).lower()


def _refresh_metadata(consumer: Consumer, partitions: Iterable[str]) -> None:
    """librdkafka caches metadata; after an expansion, ask for the topics again."""
    for topic in {parse_partition(p)[0] for p in partitions}:
        try:
            consumer.list_topics(topic, timeout=_LOOKUP_TIMEOUT_S)
        except KafkaException:
            pass        # the retry that follows reports the real error


def parse_partition(name: str) -> tuple[str, int]:
    topic, _, number = name.rpartition(":")
    return topic, int(number)


def partition_name(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def to_topic_partitions(offsets: Mapping[str, int]) -> list[TopicPartition]:
    return [TopicPartition(*parse_partition(p), offset) for p, offset in offsets.items()]


@_KAFKA_RETRY
def watermarks(consumer: Consumer, partition: str) -> tuple[int, int]:
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(*parse_partition(partition)), timeout=_LOOKUP_TIMEOUT_S, cached=False)
    except KafkaException:
        _refresh_metadata(consumer, [partition])
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
    found = consumer.committed([TopicPartition(*parse_partition(p)) for p in names],
                               timeout=timeout)
    result: dict[str, int] = {}
    for tp in found:
        name = partition_name(tp.topic, tp.partition)
        if tp.error is not None:
            _refresh_metadata(consumer, names)
            raise KafkaException(tp.error)
        result[name] = tp.offset if tp.offset >= 0 else watermarks(consumer, name)[0]
    return result
