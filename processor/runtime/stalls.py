"""When a task's read of a partition has stalled: `processor.stall_timeout_ms`.

A consumer can stop fetching one partition while it goes on with the others: a client
that lost one broker's connection, a pause librdkafka kept across an unassign, a fetch
a broker answers with nothing from some offset on. Nothing else notices: the task is
still reported in its role, its other partitions move, and the coordinator calls the job
balanced while the partition's records pile up unread.

So every read partition of every task is watched: its position (how far the task's
consumer has read it) and its target (how far it could read: the partition's committed
end for an active task, the replica's cap for a warmup or standby). A partition is
*behind* when its target moved past where it was when the position last moved, and
is still ahead of the position; behind for `stall_timeout_ms` with the position standing
still, it is *stalled*: the processor logs it once, counts it, and recovers the read
(a new consumer, assigned where the task goes on). It stays stalled, and reported so,
until its position moves; a recovery that did not help is tried again after another
timeout.

The decisions are pure functions over plain data; processor/runtime/stall_watch.py
gathers the positions and ends and carries the recoveries out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Read", "Stall", "Watched", "observe"]

# (task, partition): one read a task makes
Read = tuple[str, str]


@dataclass(frozen=True)
class Watched:
    """One read's progress: its position, since when it stands there, the target it had
    then, since when it has been behind (None: it is not), and whether it is stalled."""

    position: int
    since: float
    target_then: int
    behind_since: float | None = None
    stalled: bool = False


@dataclass(frozen=True)
class Stall:
    """A read found stalled now: recover it (and, when `first`, log and count it)."""

    task: str
    partition: str
    position: int
    target: int
    seconds: float
    first: bool


def observe(book: Mapping[Read, Watched], now: float,
            seen: Mapping[Read, tuple[int, int | None]], timeout_s: float
            ) -> tuple[dict[Read, Watched], list[Stall]]:
    """The book after one look at every read's (position, target), and the reads to
    recover now.

    `seen` lists every read being watched now (a read missing from it is forgotten:
    its task left, or it is not read at the moment); a target of None is not known yet
    (the read is watched from its position alone). A read is recovered when it has
    been behind for `timeout_s` with its position standing still, and again every
    `timeout_s` while it stays so; `first` is set the first time in a stall.
    """
    out: dict[Read, Watched] = {}
    stalls: list[Stall] = []
    for read, (position, target) in seen.items():
        old = book.get(read)
        if old is None or position != old.position:
            out[read] = Watched(position, now, target if target is not None else position)
            continue
        if target is None or target <= max(old.target_then, position):
            # nothing came to read since the position last moved: not behind
            out[read] = Watched(old.position, old.since, old.target_then)
            continue
        behind = old.behind_since if old.behind_since is not None else now
        if now - behind < timeout_s:
            out[read] = Watched(old.position, old.since, old.target_then, behind, old.stalled)
            continue
        stalls.append(Stall(read[0], read[1], position, target, now - old.since,
                            not old.stalled))
        # the next try, if this recovery does not move the position, comes a timeout on
        out[read] = Watched(old.position, old.since, old.target_then, now, True)
    return out, stalls
