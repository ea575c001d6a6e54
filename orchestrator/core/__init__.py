"""Pure decisions: grouping, job model, liveness, roles, handoffs, assignment, placement.

No confluent_kafka, no threads, no time.*: the clock is injected.
"""

__all__ = [
    "assignment", "changelog", "coordinator", "grouping", "handoff", "handoff_driver",
    "liveness", "model", "placement", "roles", "settings", "split", "views",
]
