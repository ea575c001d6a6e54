"""Pure decisions: grouping, job model, liveness, roles, handoffs, assignment, placement.

No confluent_kafka, no threads, no time.*: the clock is injected.
"""
