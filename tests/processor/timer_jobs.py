"""A job with stream-time timers, and its oracle: what its output must be, computed from
the input topic alone (keys, offsets, timestamps, per partition in offset order).

`Gaps` counts each key's records; every record moves the key's one timer to its
timestamp + `gap_ms` (the earlier one cancelled). When the partition's stream time
reaches it, the key's run closes: `on_timer` outputs `closed:<count>@<time>` and
forgets the count. Each record outputs `n:<count>`. So every output depends on where
each timer fired relative to the key's records: a timer fired twice, late, early or
not at all changes the key's sequence.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from processor import Context, Emitted, Job, Record, State, Timer

__all__ = ["GAP_MS", "Gaps", "GapsModel", "Remind", "expected_outputs"]

GAP_MS = 400


class Gaps(Job):
    """Per key: a count of its records since its last gap of `gap_ms` of stream time."""

    def setup(self, context: Context) -> None:
        self.timers = context.timers
        self.gap = int(self.params.get("gap_ms", GAP_MS))

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        key = record.key
        if key is None:
            raise ValueError("Gaps needs keyed records")
        count, due = state.get(key, (0, None))
        if due is not None:
            self.timers.cancel(due)
        due = record.timestamp + self.gap
        self.timers.at(due)
        state[key] = [count + 1, due]
        yield key, f"n:{count + 1}"

    def on_timer(self, timer: Timer, state: State) -> Iterator[Emitted]:
        count, _ = state.pop(timer.key)
        yield timer.key, f"closed:{count}@{timer.time}"


class Remind(Job):
    """Each record asks for a reminder 300 ms of wall-clock time later (a wall-clock
    timer named by the record): on_timer outputs `reminder:<partition>:<offset>`; each
    record outputs `seen:<partition>:<offset>`."""

    def setup(self, context: Context) -> None:
        self.timers = context.timers

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        self.timers.at_wall(int(time.time() * 1000) + 300,
                            name=f"{record.partition}:{record.offset}")
        yield record.key, f"seen:{record.partition}:{record.offset}"

    def on_timer(self, timer: Timer, state: State) -> Iterator[Emitted]:
        yield timer.key, f"reminder:{timer.name}"


def _order(entry: tuple[int, bytes]) -> tuple[int, int, bytes]:
    """Timers due together fire by time, then key (shorter keys first: their stored
    names carry the key's length before it)."""
    return entry[0], len(entry[1]), entry[1]


class GapsModel:
    """Gaps' rules over records given partition by partition in offset order, plainly:
    a clock and a set of timers per partition; at a barrier marker, the children's
    clocks start at the parent's and the timers of keys homed on a child move there."""

    def __init__(self, gap_ms: int = GAP_MS) -> None:
        self.gap = gap_ms
        self.clocks: dict[Any, int] = {}
        self.timers: dict[Any, set[tuple[int, bytes]]] = defaultdict(set)
        self.state: dict[bytes, list[int]] = {}
        self.outputs: dict[bytes, list[str]] = defaultdict(list)

    def record(self, partition: Any, key: bytes, stamp: int) -> None:
        if stamp >= 0:
            self.clocks[partition] = max(self.clocks.get(partition, stamp), stamp)
        clock = self.clocks.get(partition)
        pending = self.timers[partition]
        while pending and clock is not None:
            first = min(pending, key=_order)
            if first[0] > clock:
                break
            pending.discard(first)
            count = self.state.pop(first[1])[0]
            self.outputs[first[1]].append(f"closed:{count}@{first[0]}")
        count, due = self.state.get(key, [0, None])
        if due is not None:
            pending.discard((due, key))
        due = stamp + self.gap
        pending.add((due, key))
        self.state[key] = [count + 1, due]
        self.outputs[key].append(f"n:{count + 1}")

    def rehome(self, partition: Any, children: Iterable[Any], home: Any) -> None:
        """`children`: the child partitions; `home(key)`: the partition a key now lives on."""
        clock = self.clocks.get(partition)
        if clock is None:
            return
        children = set(children)
        for child in children:
            self.clocks[child] = max(self.clocks.get(child, clock), clock)
        for entry in list(self.timers[partition]):
            target = home(entry[1])
            if target != partition and target in children:
                self.timers[partition].discard(entry)
                self.timers[target].add(entry)


def expected_outputs(inputs: Iterable[tuple[Any, bytes, int, int]],
                     gap_ms: int = GAP_MS) -> dict[bytes, list[str]]:
    """Per key, Gaps' outputs for `inputs` (partition, key, offset, timestamp), given in
    partition-offset order: the rules of docs/jobs.md ("Timers"), plainly."""
    model = GapsModel(gap_ms)
    for partition, key, _, stamp in inputs:
        model.record(partition, key, stamp)
    return model.outputs
