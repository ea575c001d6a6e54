"""What a task's replay reads (S2), from the coordinator's job model: pure.

An ordinary task replays its own partitions. A split child also reads the ancestors
of its partitions (orchestrator/wire/lineage.py) up to their barriers, keeping only
the records whose key the producers' partitioner now sends to the child; its own
partitions wait for those ancestors (`gates`). A parent consumes its own partitions
plus those of the children still embedded in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.wire.lineage import Barriers, ancestry
from orchestrator.wire.partitioners import home_partition
from orchestrator.wire.partitions import split_partition
from processor.replica import KeyFilter

__all__ = ["ReplaySources", "consumed_partitions", "replay_sources", "topic_counts"]

@dataclass(frozen=True)
class ReplaySources:
    """S2 of one task: partitions in replay order, filters, gates and barrier ends."""

    partitions: list[str]
    own: list[str]
    filters: dict[str, KeyFilter] = field(default_factory=dict)
    gates: dict[str, list[str]] = field(default_factory=dict)
    ends: dict[str, int] = field(default_factory=dict)   # ancestor -> stop before this

    def cap(self, partition: str, committed: int) -> int:
        """The owner's committed offset, or for an ancestor no further than its barrier."""
        end = self.ends.get(partition)
        return committed if end is None else min(committed, end)


def consumed_partitions(task: str, tasks: Mapping[str, Sequence[str]],
                        embedded: Mapping[str, str]) -> list[str]:
    """`task`'s partitions plus those of the split children embedded in it."""
    own = list(tasks.get(task, ()))
    return own + [p for child, parent in embedded.items() if parent == task
                  for p in tasks.get(child, ())]


def topic_counts(tasks: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Each input topic's partition count as the job model has it."""
    counts: dict[str, int] = {}
    for partitions in tasks.values():
        for name in partitions:
            topic, number = split_partition(name)
            counts[topic] = max(counts.get(topic, 0), number + 1)
    return counts


def replay_sources(partitions: Sequence[str], barriers: Barriers, partitioner: str,
                   counts: Mapping[str, int]) -> ReplaySources:
    """S2 for a task consuming `partitions` (see the module docstring)."""
    own = list(partitions)
    ancestors: list[str] = []
    homes: dict[str, set[int]] = {}
    ends: dict[str, int] = {}
    gates: dict[str, list[str]] = {}
    for name in own:
        for source in ancestry(name, barriers):
            if source.partition in own:
                continue
            if source.partition not in ancestors:
                ancestors.append(source.partition)
            topic, number = split_partition(name)
            homes.setdefault(source.partition, set()).add(number)
            ends[source.partition] = source.end
            gates.setdefault(name, []).append(source.partition)
    filters = {a: _key_filter(partitioner, counts[split_partition(a)[0]], frozenset(h))
               for a, h in homes.items()}
    return ReplaySources(ancestors + own, own, filters, gates, ends)


def _key_filter(partitioner: str, count: int, homes: frozenset[int]) -> KeyFilter:
    def keep(key: bytes | None) -> bool:
        return home_partition(partitioner, key, count) in homes
    return keep
