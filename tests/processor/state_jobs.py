"""A job whose state uses entries that expire and prefix scans, and its oracle: what its
output must be, computed from the input topic alone (keys, values, offsets, timestamps).

`RecentSum` keeps, per key, each record's value under `<key>/<offset>` for `window_ms` of
stream time and a running total under the key itself that lapses after `gap_ms` without
a record; for each record it outputs `<count>:<sum>:<total>`: the number and sum of the
key's values within the window (a prefix scan) and the total since the key's last gap.
Keys like `k1` and `k10` share a leading text but never a prefix (`k1/` is not `k10/`),
and `k1` itself is not under `k1/`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from processor import Emitted, Job, Record, State

__all__ = ["RecentSum", "describe", "expected_outputs", "wrong_keys"]

WINDOW_MS = 1000
GAP_MS = 700


class RecentSum(Job):
    """Per key: values of the last `window_ms` (scanned) and a total that lapses."""

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        key, value = record.key, int(record.value or b"0")
        if key is None:
            raise ValueError("RecentSum needs keyed records")
        window = int(self.params.get("window_ms", WINDOW_MS))
        gap = int(self.params.get("gap_ms", GAP_MS))
        total = state.get(key, 0) + value
        state.put(key, total, ttl_ms=gap)
        state.put(key + b"/%012d" % record.offset, value, ttl_ms=window)
        recent = [v for _, v in state.scan(key + b"/")]
        yield key, f"{len(recent)}:{sum(recent)}:{total}"


def expected_outputs(inputs: Iterable[tuple[bytes, bytes, int, int]],
                     window_ms: int = WINDOW_MS, gap_ms: int = GAP_MS
                     ) -> dict[bytes, list[str]]:
    """Per key, RecentSum's outputs for `inputs` (key, value, offset, timestamp), given
    in partition-offset order: the rules of docs/jobs.md, plainly (an entry is absent
    to records at or past its expiry; the read that finds it so deletes it)."""
    entries: dict[bytes, dict[int, tuple[int, int]]] = defaultdict(dict)
    totals: dict[bytes, tuple[int, int]] = {}
    outputs: dict[bytes, list[str]] = defaultdict(list)
    for key, raw, offset, stamp in inputs:
        value = int(raw)
        known = totals.get(key)
        total = (known[0] if known is not None and known[1] > stamp else 0) + value
        totals[key] = (total, stamp + gap_ms)
        mine = entries[key]
        mine[offset] = (value, stamp + window_ms)
        recent = []
        for at in sorted(mine):
            kept, expiry = mine[at]
            if expiry <= stamp:
                del mine[at]
            else:
                recent.append(kept)
        outputs[key].append(f"{len(recent)}:{sum(recent)}:{total}")
    return outputs


def wrong_keys(expected: dict[bytes, list[str]], actual: Iterable[tuple[bytes, bytes]]
               ) -> list[str]:
    """The keys whose output sequence is not the expected one, each with its first
    difference (an empty list: every key's outputs exactly as expected)."""
    got: dict[bytes, list[str]] = defaultdict(list)
    for key, value in actual:
        got[key].append(value.decode())
    wrong: list[str] = []
    for key in sorted(set(expected) | set(got)):
        want, have = expected.get(key, []), got.get(key, [])
        if want != have:
            at = next((i for i, (w, h) in enumerate(zip(want, have, strict=False))
                       if w != h),
                      min(len(want), len(have)))
            wrong.append(f"{key!r}: {len(want)} expected, {len(have)} output; first "
                         f"difference at #{at}: want {want[at:at + 3]}, got {have[at:at + 3]}")
    return wrong


def describe(messages: Iterable[Any]) -> list[tuple[bytes, bytes, int, int]]:
    """(key, value, offset, timestamp) of confluent-kafka messages."""
    return [(m.key(), m.value(), m.offset(), m.timestamp()[1]) for m in messages]
