"""Kafka plumbing: the watched producer, retry policy, offsets, topics, the coordinator stream."""

__all__ = ["offsets", "retry", "stream", "topics", "watched_producer"]
