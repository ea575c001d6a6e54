"""Balance: how many tasks each processor should hold (capacity-weighted, within
`balance_factor`), and a heap of processors by load."""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from orchestrator.core.assignment.model import Key

__all__ = ["LoadHeap", "Scale", "balanced_targets"]


@dataclass(frozen=True)
class Scale:
    """How one class of tasks weighs the processors.

    ``caps``: capacities. ``base``: tasks of another class already there, counted in the
    load (stateless tasks balance the total on top of the stateful targets). ``bias``:
    a tie-break only (standbys prefer processors with fewer active tasks).
    """

    caps: Sequence[int]
    base: Sequence[int]
    bias: Sequence[int]

    @classmethod
    def plain(cls, caps: Sequence[int], bias: Sequence[int] | None = None) -> Scale:
        """No base load; ``bias`` defaults to none."""
        return cls(caps, [0] * len(caps), bias if bias is not None else [0] * len(caps))

    def unit(self, i: int, m: int) -> tuple[float, float, int]:
        """The fixed rank of processor ``i``'s m-th slot: lighter load, then bias, then id.

        The rank does not depend on the current counts: that is what keeps targets
        stable from one call to the next. (Equal fractions give equal floats: IEEE
        division is correctly rounded.)
        """
        c = self.caps[i]
        return ((self.base[i] + m) / c, (self.bias[i] + m) / c, i)

    def bounds(self, upper: Fraction, factor: int) -> tuple[list[int], list[int]]:
        """Per-processor count bounds of the band [upper - factor, upper] of load/capacity."""
        low = upper - factor
        lo = [max(0, _ceil_times(low, c) - b) for c, b in zip(self.caps, self.base, strict=True)]
        hi = [_floor_times(upper, c) - b for c, b in zip(self.caps, self.base, strict=True)]
        return lo, hi



def _floor_times(x: Fraction, c: int) -> int:
    """floor(x * c), exactly."""
    return (x.numerator * c) // x.denominator



def _reduced(num: int, den: int) -> tuple[int, int]:
    """The fraction num/den in lowest terms, as a hashable pair."""
    g = math.gcd(num, den)
    return num // g, den // g



def _ceil_times(x: Fraction, c: int) -> int:
    """ceil(x * c), exactly."""
    return -((-x.numerator * c) // x.denominator)



def _best_band(counts: Sequence[int], scale: Scale, total: int, factor: int) -> Fraction:
    """The lowest band top U whose balanced counts need the fewest moves.

    Why a sweep: for a band the fewest moves are ``sum(max(0, k - hi))`` plus the surplus
    of the clamped counts over ``total``. Bounds only change at loads ``m / c``, and a
    feasible top lies in ``[max(mean, base/c), mean + factor]``, so only the change
    points in that window are visited, each updating running sums in O(1). A point
    dominates the open interval after it (same upper bounds, lower lower bounds).
    While the clamped sum is at most ``total`` the cost never rises (raising a bound
    only lowers the excess); once it is above, raising ``hi`` trades one excess for one
    surplus and raising ``lo`` only adds surplus, so the cost never falls: the sweep
    stops at the first feasible point past ``total``.
    """
    caps, base = scale.caps, scale.base
    mean = Fraction(total + sum(base), sum(caps))
    start = max([mean] + [Fraction(b, c) for b, c in zip(base, caps, strict=True)])
    raw_lo = [_ceil_times(start - factor, c) for c in caps]
    raw_hi = [_floor_times(start, c) for c in caps]
    # Bounds depend on the capacity only, so events are per capacity; points are keyed
    # by reduced (numerator, denominator), as hashing Fractions is slow.
    same_cap: dict[int, list[int]] = defaultdict(list)
    for i, c in enumerate(caps):
        same_cap[c].append(i)
    raise_hi: dict[tuple[int, int], list[int]] = defaultdict(list)
    raise_lo: dict[tuple[int, int], list[int]] = defaultdict(list)
    top = mean + factor
    for c in same_cap:
        for m in range(_floor_times(start, c) + 1, _floor_times(top, c) + 1):
            raise_hi[_reduced(m, c)].append(c)  # floor(U*c) becomes m at U = m/c
        for m in range(_ceil_times(start - factor, c), _floor_times(mean, c) + 1):
            raise_lo[_reduced(m + factor * c, c)].append(c)  # ceil((U-f)c) passes m after

    def part(i: int) -> tuple[int, int, int, int]:
        lo, hi = max(0, raw_lo[i] - base[i]), raw_hi[i] - base[i]
        return lo, hi, min(max(counts[i], lo), hi), max(0, counts[i] - hi)

    sums = [sum(col) for col in zip(*(part(i) for i in range(len(caps))), strict=True)]

    def bump(raw: list[int], i: int) -> None:
        old = part(i)
        raw[i] += 1
        new = part(i)
        sums[0] += new[0] - old[0]
        sums[1] += new[1] - old[1]
        sums[2] += new[2] - old[2]
        sums[3] += new[3] - old[3]

    best: tuple[int, Fraction] | None = None
    points = raise_hi.keys() | raise_lo.keys() | {(start.numerator, start.denominator)}
    for key in sorted(points, key=lambda nd: Fraction(*nd)):
        point = Fraction(*key)
        for c in raise_hi.get(key, ()):
            for i in same_cap[c]:
                bump(raw_hi, i)
        if sums[0] <= total <= sums[1]:
            cost = sums[3] + max(0, sums[2] - total)
            if best is None or cost < best[0]:
                best = (cost, point)
            if sums[2] > total:
                break  # from here on the cost never falls
        for c in raise_lo.get(key, ()):
            for i in same_cap[c]:
                bump(raw_lo, i)
    assert best is not None, "a water-filled assignment always fits some band"
    return best[1]


def _settle(n: list[int], lo: Sequence[int], hi: Sequence[int], scale: Scale,
            total: int) -> None:
    """Correct clamped counts to ``total``: fill the lightest slots, empty the heaviest.

    Why free: adding to a processor at or above its count moves nothing, and every
    removal costs one move wherever it is made.
    """
    if sum(n) < total:
        grow = [scale.unit(i, n[i] + 1) for i in range(len(n)) if n[i] < hi[i]]
        heapq.heapify(grow)
        for _ in range(total - sum(n)):
            i = heapq.heappop(grow)[2]
            n[i] += 1
            if n[i] < hi[i]:
                heapq.heappush(grow, scale.unit(i, n[i] + 1))
    elif sum(n) > total:
        shrink = [_neg(scale.unit(i, n[i])) for i in range(len(n)) if n[i] > lo[i]]
        heapq.heapify(shrink)
        for _ in range(sum(n) - total):
            i = -heapq.heappop(shrink)[2]
            n[i] -= 1
            if n[i] > lo[i]:
                heapq.heappush(shrink, _neg(scale.unit(i, n[i])))



def _neg(key: tuple[float, float, int]) -> tuple[float, float, int]:
    """Reverse a slot rank, for a max-heap."""
    return (-key[0], -key[1], -key[2])



def balanced_targets(counts: Sequence[int], scale: Scale, total: int, factor: int) -> list[int]:
    """Balanced counts (within ``factor`` per capacity) that keep the most tasks in place."""
    if total == 0:
        return [0] * len(counts)
    lo, hi = scale.bounds(_best_band(counts, scale, total, factor), factor)
    n = [min(max(k, a), b) for k, a, b in zip(counts, lo, hi, strict=True)]
    _settle(n, lo, hi, scale, total)
    return n



class LoadHeap:
    """Processors by (at or above target, when targets are given; slot rank), lazily updated.

    Why: picking the balanced home for each of 10,000 tasks by scanning 500 processors
    would be 5 million steps; a heap makes each pick O(log P).
    """

    def __init__(self, scale: Scale, load: list[int], targets: Sequence[int] | None) -> None:
        self.scale, self.load, self.targets = scale, load, targets
        self._keys = [self._rank(i) for i in range(len(load))]
        self._heap = list(self._keys)
        heapq.heapify(self._heap)

    def _rank(self, i: int) -> Key:
        n = self.load[i]
        full = self.targets is not None and n >= self.targets[i]
        return (int(full), *self.scale.unit(i, n + 1))

    def key(self, i: int) -> Key:
        """Processor ``i``'s rank as a home for one more task (lower is better)."""
        return self._keys[i]

    def best(self, excluded: Iterable[int] = ()) -> int | None:
        """The best processor not in ``excluded``, or None when all are excluded."""
        skip, aside, found = set(excluded), [], None
        while self._heap:
            top = self._heap[0]
            i = int(top[-1])
            if top is not self._keys[i]:
                heapq.heappop(self._heap)  # stale: the load changed since it was pushed
            elif i in skip:
                aside.append(heapq.heappop(self._heap))
            else:
                found = i
                break
        for entry in aside:
            heapq.heappush(self._heap, entry)
        return found

    def add(self, i: int) -> None:
        """Record one more task on processor ``i``."""
        self.load[i] += 1
        self._keys[i] = self._rank(i)
        heapq.heappush(self._heap, self._keys[i])
