"""Developer tooling: the embedded broker profile, the Apache Kafka test broker (its
secured variant, the three-node cluster), the paused-handoff hooks, the demo, and
`baton dev` (the user's own job on the embedded broker: its daemons as child processes,
its JSON-lines records), several hosts as network namespaces on one machine, a TCP proxy
adding latency between them, and the two-host walk-through;
what the demo and the benchmarks report beside their figures: where each handoff's
pause went and the settings they changed."""

__all__ = ["cluster", "delay_proxy", "demo", "dev", "embedded", "handoff_phases", "hosts",
           "kafka", "kafka_cluster", "kafka_secure", "pauses", "records", "settings_report",
           "walkthrough"]
