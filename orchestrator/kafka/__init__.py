"""Kafka plumbing: the watched producer, retry policy, offsets, topics, the coordinator stream."""
