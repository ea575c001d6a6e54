"""Developer tooling: the embedded broker profile, the Apache Kafka test broker, the
paused-handoff hooks and the demo."""

__all__ = ["demo", "embedded", "kafka", "pauses"]
