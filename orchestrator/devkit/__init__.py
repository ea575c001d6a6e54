"""Developer tooling: the embedded broker profile, the Apache Kafka test broker (its
secured variant, the three-node cluster), the paused-handoff hooks, the demo, and
`baton dev` (the user's own job on the embedded broker: its daemons as child processes,
its JSON-lines records);
what the demo and the benchmarks report beside their figures: where each handoff's
pause went and the settings they changed."""

__all__ = ["cluster", "demo", "dev", "embedded", "handoff_phases", "kafka", "kafka_cluster",
           "kafka_secure", "pauses", "records", "settings_report"]
