"""Developer tooling: the embedded broker profile, the Apache Kafka test broker, the
paused-handoff hooks, the demo, and `baton dev` (the user's own job on the embedded
broker: its daemons as child processes, its JSON-lines records)."""

__all__ = ["cluster", "demo", "dev", "embedded", "kafka", "pauses", "records"]
