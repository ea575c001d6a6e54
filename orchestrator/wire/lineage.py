"""Where a partition's keys lived before expansions: the ancestry a split child replays.

After an input grows from n to k*n partitions, the keys of new partition ``q`` were on
its parent ``q mod n`` until the expansion barrier offset, and on ``q`` since. After a
second expansion the chain is longer. A split child rebuilds its state by reading
every ancestor up to the barrier its descendant recorded, keeping only the records whose
key the producers' partitioner now puts on ``q``, then ``q`` itself (S2). The
coordinator (split plans, lag) and the processor (warmup replay) both read it here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["AncestorRange", "Barriers", "ancestry", "s2_partitions"]

Barriers = Mapping[str, tuple[str, int]]


@dataclass(frozen=True)
class AncestorRange:
    """Read `partition` up to `end` (exclusive), keeping keys now homed on `home`."""

    partition: str
    end: int
    home: str


def ancestry(partition: str, barriers: Barriers) -> list[AncestorRange]:
    """The ancestors of `partition`, oldest first, each with the offset its keys left it.

    Raises:
        ValueError: the barriers form a cycle (a corrupt job model).
    """
    chain: list[AncestorRange] = []
    seen = {partition}
    current = partition
    while current in barriers:
        parent, offset = barriers[current]
        if parent in seen:
            raise ValueError(f"expansion barriers of {partition} form a cycle at {parent}")
        seen.add(parent)
        chain.append(AncestorRange(parent, offset, partition))
        current = parent
    return chain[::-1]


def s2_partitions(partitions: Sequence[str], barriers: Barriers) -> list[str]:
    """S2 as names: every ancestor (oldest first, once), then the partitions themselves."""
    names: list[str] = []
    for partition in partitions:
        for source in ancestry(partition, barriers):
            if source.partition not in names and source.partition not in partitions:
                names.append(source.partition)
    return names + [p for p in partitions if p not in names]
