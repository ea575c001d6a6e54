"""Kafka plumbing: librdkafka logs, the watched producer, retry policy, offsets, topics,
barrier markers, the coordinator stream, which settings each kind of client takes."""

__all__ = [
    "logs", "markers", "offsets", "retry", "settings", "stream", "topics", "watched_producer",
]
