"""Kafka plumbing: librdkafka logs, the watched producer, retry policy, offsets, topics,
the coordinator stream, which settings each kind of client takes."""

__all__ = ["logs", "offsets", "retry", "settings", "stream", "topics", "watched_producer"]
