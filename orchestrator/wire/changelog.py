"""The changelog of `catch_up.source = "changelog"`: its topic, and a task's partition.

Each active task writes its state changes to its own partition of the compacted topic
`baton.<job>.changelog`, inside the Kafka transaction that carries its outputs and
input offsets. Which partition is the job model's (orchestrator/core/changelog.py);
both daemons name the topic and its partitions the same way through this module.
"""

from __future__ import annotations

from orchestrator.wire.partitions import format_partition

__all__ = ["changelog_partition", "changelog_topic"]


def changelog_topic(job: str) -> str:
    """`baton.<job>.changelog`."""
    return f"baton.{job}.changelog"


def changelog_partition(job: str, number: int) -> str:
    """Partition `number` of the job's changelog, written "topic:N"."""
    return format_partition(changelog_topic(job), number)
