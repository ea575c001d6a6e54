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

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from processor import Context, Emitted, Job, Record, State, Timer

__all__ = ["GAP_MS", "Gaps", "expected_outputs"]

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


def _order(entry: tuple[int, bytes]) -> tuple[int, int, bytes]:
    """Timers due together fire by time, then key (shorter keys first: their stored
    names carry the key's length before it)."""
    return entry[0], len(entry[1]), entry[1]


def expected_outputs(inputs: Iterable[tuple[bytes, bytes, int, int]] | Iterable[Any],
                     gap_ms: int = GAP_MS) -> dict[bytes, list[str]]:
    """Per key, Gaps' outputs for `inputs` (partition, key, offset, timestamp), given in
    partition-offset order: the rules of docs/jobs.md ("Timers"), plainly."""
    clocks: dict[Any, int] = {}
    timers: dict[Any, set[tuple[int, bytes]]] = defaultdict(set)
    state: dict[bytes, list[int]] = {}
    outputs: dict[bytes, list[str]] = defaultdict(list)
    for partition, key, _, stamp in inputs:
        if stamp >= 0:
            clocks[partition] = max(clocks.get(partition, stamp), stamp)
        clock = clocks.get(partition)
        pending = timers[partition]
        while pending and clock is not None:
            first = min(pending, key=_order)
            if first[0] > clock:
                break
            pending.discard(first)
            count = state.pop(first[1])[0]
            outputs[first[1]].append(f"closed:{count}@{first[0]}")
        count, due = state.get(key, [0, None])
        if due is not None:
            pending.discard((due, key))
        due = stamp + gap_ms
        pending.add((due, key))
        state[key] = [count + 1, due]
        outputs[key].append(f"n:{count + 1}")
    return outputs
