"""Kafka plumbing: librdkafka logs, the watched producer, retry policy, offsets, topics,
the coordinator stream."""

__all__ = ["logs", "offsets", "retry", "stream", "topics", "watched_producer"]
