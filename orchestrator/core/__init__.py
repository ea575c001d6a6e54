"""Pure decisions: grouping, job model, liveness, forgetting dead processors, roles,
handoffs, assignment, placement, lag, service discovery, the autoscaling
recommendation and what `baton autoscale` does with it, the coordinator core and what
it persists and replies.

No confluent_kafka, no threads, no time.*: the clock is injected.
"""

__all__ = [
    "assignment", "autoscale", "changelog", "coordinator", "discovery", "failures", "forgetting",
    "grouping", "grouping_checks", "handoff", "handoff_driver", "lag", "liveness", "model",
    "picture", "placement", "replies", "roles", "scaling", "settings", "split", "stream_records",
    "views",
]
