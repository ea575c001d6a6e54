"""Developer tooling: the embedded broker profile, the Apache Kafka test broker (and its
secured variant), the paused-handoff hooks, the demo, and `baton dev` (the user's own
job on the embedded broker: its daemons as child processes, its JSON-lines records)."""

__all__ = ["cluster", "demo", "dev", "embedded", "kafka", "kafka_secure", "pauses", "records"]
