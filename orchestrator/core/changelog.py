"""The changelog's shape: which partition each task writes, and what the topic must be.

Rules (catch_up.source = "changelog"; the topic is `baton.<job>.changelog`):

- Every task writes to a partition of its own, recorded in the job model (so in the
  coordinator stream) and sent to processors with it. A task keeps its partition for
  good: its history is there. A task the model gains (a split child) gets the next
  partition never used, in task order, and the topic grows by it; partitions are
  never reused, so no task ever reads another task's history as its own.
- A coordinator started with catch_up.source = "input" retires the mapping: the
  partitions stop receiving changes, so their history stops being the tasks' state.
  Back on the changelog source, the tasks get fresh partitions (after every partition
  ever used), which their owners fill with a snapshot of their stores first.
- The topic must be compacted (a delete policy would drop the only copy of keys that
  have not changed for a while) and must hold every partition the model already
  used. A topic that is missing is created; one that is not compact, or that lacks
  partitions tasks have written to (recreated smaller, say), is refused: nothing can
  repair it automatically, and running on would silently lose state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ChangelogTopicPlan", "changelog_partitions", "plan_changelog_topic"]


def changelog_partitions(tasks: Sequence[str], previous: Mapping[str, int],
                         first_free: int = 0) -> dict[str, int]:
    """Task -> changelog partition: each task's previous partition, new tasks the next
    partitions never used (in `tasks` order). Tasks no longer in `tasks` keep theirs
    reserved, so a partition is never handed to another task.

    Args:
        tasks: the model's tasks, in task order.
        previous: the mapping in force (empty on a job's first changelog start).
        first_free: no partition below this is handed out (retired ones are below).
    """
    mapping = dict(previous)
    following = max(max(mapping.values(), default=-1) + 1, first_free)
    for task in tasks:
        if task not in mapping:
            mapping[task] = following
            following += 1
    return mapping


@dataclass(frozen=True)
class ChangelogTopicPlan:
    """What to do with the changelog topic before the coordinator serves anyone.

    Attributes:
        create: create the topic with this many partitions (0: it exists).
        grow_to: add partitions up to this count (0: it has enough).
        problem: why the topic is refused (the operator must act), or None.
    """

    create: int = 0
    grow_to: int = 0
    problem: str | None = None


def plan_changelog_topic(topic: str, partitions: int | None, cleanup_policy: str | None,
                         mapping: Mapping[str, int], written: int) -> ChangelogTopicPlan:
    """Check the changelog topic against the mapping (see the module docstring).

    Args:
        topic: the topic's name, for messages.
        partitions: its partition count; None when it does not exist.
        cleanup_policy: its `cleanup.policy` ("compact", "delete", "compact,delete").
        mapping: task -> partition, as this start will run.
        written: how many partitions the job wrote to before (0: never; then the topic
            must already fit the mapping, or be missing).
    """
    needed = max(mapping.values(), default=-1) + 1
    if partitions is None:
        return ChangelogTopicPlan(create=needed)
    policies = {p.strip() for p in (cleanup_policy or "").split(",")}
    if "compact" not in policies:
        return ChangelogTopicPlan(problem=(
            f"changelog topic {topic!r} has cleanup.policy={cleanup_policy or 'unknown'}, "
            f"not compact: it would drop the changelog records of keys that stopped "
            f"changing, which warmups need. Set cleanup.policy=compact on it, or delete it "
            f"so the coordinator creates it, and start again"))
    written = written or needed
    if partitions < written:
        return ChangelogTopicPlan(problem=(
            f"changelog topic {topic!r} has {partitions} partition(s) but the job's "
            f"{len(mapping)} task(s) write to {written} (one each; the mapping is in the "
            f"coordinator stream): was it recreated smaller? Grow it to {written} "
            f"partitions (kafka-topics --alter --partitions {written}), or delete it so "
            f"the coordinator creates it afresh, and start again"))
    return ChangelogTopicPlan(grow_to=needed if partitions < needed else 0)
