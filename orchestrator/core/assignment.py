"""Assignment: which processor runs each task, and in which role (after KIP-441).

Rules and theory of operation (DESIGN.md "Assignment"). Everything here is pure: no I/O,
no clock, no randomness; the same input gives the same output, whatever the order of the
tasks, the processors or their lag mappings.

Inputs: the tasks, the live processors (capacity, previous active / standby / warmup tasks,
lag per task in records) and an ``AssignmentConfig``. Output: active, warmup and standby
tasks per processor, and ``follow_up`` (run again once the warmups have caught up).

- *Caught up*: a processor is caught up on a task when its reported lag is at most
  ``acceptable_lag``. A task missing from its ``lags`` has unknown lag: never caught up.
  The previous active owner is always caught up on its task (it IS the owner), whatever
  ``lags`` say. Every processor is caught up on a stateless task (no state to rebuild).
- *Balance*: counts are capacity-weighted. Balanced means that, per unit of capacity,
  the most and the least loaded processors differ by at most ``balance_factor`` tasks.
  Among all balanced count vectors, Baton picks one that needs the fewest moves (an exact
  sweep over the bands ``[U - balance_factor, U]`` of load per capacity), keeps every
  task where it is up to its owner's target, and moves only the excess to processors
  below their target. Stateful tasks are balanced among themselves; stateless tasks are
  then balanced so that the total (stateful targets plus stateless tasks) is balanced too.
- *Lag-aware moves*: an active task moves only to a caught-up processor, preferring a
  previous warmup, then the least lag (a standby, say). When the target is not caught
  up, the task stays with its owner and the target gets a **warmup**, at most
  ``max_warmups`` in the whole assignment, and ``follow_up`` is true. A warmup that
  reports an acceptable lag is caught up, so its task moves in the same call (no probing
  interval). Warmups in progress are kept before new ones are started (least lag first),
  then partly caught-up replicas are chosen; a warmup is never on the active's processor.
  Stateless tasks move at once (no warmup). A task with an owner never moves for equal
  lags: only the excess over a target moves.
- *New or orphaned tasks* (no owner among the processors) go to the processor with the
  least lag (unknown lag is infinite); equal lags go to the lightest load per capacity,
  then the lowest id. They are placed before the targets are computed, so the targets
  count them where they landed; if that processor ends up above its target, the task may
  go on (first, as it is no real move) to a caught-up processor below its target.
- *Standbys* (``num_standbys``, stateful tasks only): never on the processor running the
  task's active or warmup, never two of a task on one processor, at most
  ``processors - 1`` (minus a warmup) per task. Previous standbys are kept (least lag
  first) up to each processor's balanced standby target; new ones go to a processor below
  its target, preferring the task's previous owner (its store is warm), then a caught-up
  one, then the least lag, then the lightest load.

Convergence bound. Let ``R`` be the active moves still pending after the first call's
immediate moves, and ``W = max_warmups``. If, before each next call, every warmup
reports lag <= ``acceptable_lag`` and no processor joins or leaves, then ``follow_up``
is false after at most ``ceil(R / W) + 1`` calls, and the total number of active moves
is exactly the minimum for a balanced end state. Proof sketch:

1. Targets do not change between calls. Each move goes from a processor above its target
   to one below it, which lowers the cost of the chosen band by one, and one move lowers
   any band's cost by at most one; so the chosen band (the lowest of the cheapest) stays
   chosen. Within a band, the counts are the clamped counts plus or minus the cheapest
   slots in a fixed order (``_Scale.unit``), and such moves leave that choice unchanged.
2. Warmups reserve one excess task and one deficit slot each, so a call's warmups fit the
   next call's excess and deficits; previous warmups are promoted before any other move,
   so every call after the first moves ``min(W, remaining)`` tasks or more.
3. Hence the excess reaches zero within ``ceil(R / W)`` calls after the first; that call
   starts no warmup, so its ``follow_up`` is false. No task moves twice and none moves
   into a processor at or above its target, so the moves are the fewest possible.

Scaling 99 tasks from 2 to 3 processors (nothing caught up) thus moves 33 tasks in
``ceil(33 / 2) + 1 = 18`` calls with the default ``max_warmups=2``; Kafka Streams'
round-robin deal would move about 66.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

__all__ = [
    "Assignment",
    "AssignmentConfig",
    "AssignmentError",
    "Move",
    "ProcessorAssignment",
    "ProcessorSnapshot",
    "Scenario",
    "ScenarioError",
    "TaskInfo",
    "active_moves",
    "assign",
    "format_assignment",
    "format_scenario",
    "parse_scenario",
    "scenario_from_json",
]

_INF = math.inf
# A sort key: floats and ints only, compared left to right.
_Key = tuple[float, ...]


class AssignmentError(ValueError):
    """Input the assignor cannot make sense of (duplicate ids, two owners of one task)."""


class ScenarioError(ValueError):
    """A scenario document that is not valid; ``path`` names the offending key."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


# --- data -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TaskInfo:
    """A task to assign; stateless tasks need no catch-up and move freely."""

    name: str
    stateful: bool = True


@dataclass(frozen=True)
class ProcessorSnapshot:
    """A live processor: its capacity, what it ran last time, and its lag per task."""

    id: str
    capacity: int = 1
    active: frozenset[str] = frozenset()
    standby: frozenset[str] = frozenset()
    warmup: frozenset[str] = frozenset()
    lags: Mapping[str, int] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        # Accept any iterable or mapping, keep an immutable copy: callers cannot alias it.
        for role in ("active", "standby", "warmup"):
            object.__setattr__(self, role, frozenset(getattr(self, role)))
        object.__setattr__(self, "lags", MappingProxyType(dict(self.lags)))
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int) \
                or self.capacity < 1:
            raise AssignmentError(f"processor {self.id!r}: capacity must be an integer >= 1, "
                                  f"got {self.capacity!r}")


@dataclass(frozen=True)
class AssignmentConfig:
    """The ``[catch_up]`` knobs the assignor uses (DESIGN.md "Configuration")."""

    acceptable_lag: int = 1000
    max_warmups: int = 2
    num_standbys: int = 0
    balance_factor: int = 1

    def __post_init__(self) -> None:
        # max_warmups and balance_factor of 0 could never reach balance (KIP-441 too).
        for name, low in (("acceptable_lag", 0), ("max_warmups", 1), ("num_standbys", 0),
                          ("balance_factor", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise AssignmentError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class ProcessorAssignment:
    """One processor's roles, each tuple sorted by task name."""

    id: str
    active: tuple[str, ...] = ()
    warmup: tuple[str, ...] = ()
    standby: tuple[str, ...] = ()


@dataclass(frozen=True)
class Assignment:
    """Roles for every processor (sorted by id); ``follow_up``: warmups are in progress."""

    processors: tuple[ProcessorAssignment, ...]
    follow_up: bool

    def owners(self) -> dict[str, str]:
        """Task name -> the id of the processor running it actively."""
        return {t: p.id for p in self.processors for t in p.active}


@dataclass(frozen=True)
class Move:
    """An active task changing hands; ``source`` is None for a new or orphaned task."""

    task: str
    source: str | None
    target: str


@dataclass(frozen=True)
class Scenario:
    """A what-if input for ``baton assign``: exactly the arguments of ``assign``."""

    tasks: tuple[TaskInfo, ...]
    processors: tuple[ProcessorSnapshot, ...]
    config: AssignmentConfig


# --- the index view -----------------------------------------------------------------------------

class _View:
    """The input sorted and indexed: integer processor indices keep heaps and sorts cheap,
    and sorting by name and id here is what makes the output independent of input order."""

    def __init__(self, tasks: Iterable[TaskInfo], processors: Iterable[ProcessorSnapshot],
                 config: AssignmentConfig) -> None:
        self.config = config
        self.tasks = sorted(tasks, key=lambda t: t.name)
        self.procs = sorted(processors, key=lambda p: p.id)
        _check_unique([t.name for t in self.tasks], "task")
        _check_unique([p.id for p in self.procs], "processor id")
        self.caps = [p.capacity for p in self.procs]
        self.stateful = {t.name: t.stateful for t in self.tasks}
        self.holder: dict[str, int] = {}
        self.lags: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, proc in enumerate(self.procs):
            for name in sorted(proc.active & self.stateful.keys()):
                if name in self.holder:
                    other = self.procs[self.holder[name]].id
                    raise AssignmentError(f"task {name!r} is active on both {other!r} and "
                                          f"{proc.id!r}; a task has one active owner")
                self.holder[name] = i
            for name, lag in proc.lags.items():
                if self.stateful.get(name):
                    self.lags[name].append((i, lag))

    def caught_up(self, i: int, name: str, lag: float) -> bool:
        """Whether processor ``i`` with ``lag`` on ``name`` may take over its active."""
        return self.holder.get(name) == i or lag <= self.config.acceptable_lag

    def lag(self, i: int, name: str) -> float:
        """Processor ``i``'s reported lag on ``name``; infinite when not reported."""
        return self.procs[i].lags.get(name, _INF)


def _check_unique(names: Sequence[str], what: str) -> None:
    """Reject duplicates: two tasks or processors with one name make roles ambiguous."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise AssignmentError(f"duplicate {what} {name!r}")
        seen.add(name)


# --- balanced targets ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Scale:
    """How one class of tasks weighs the processors.

    ``caps``: capacities. ``base``: tasks of another class already there, counted in the
    load (stateless tasks balance the total on top of the stateful targets). ``bias``:
    a tie-break only (standbys prefer processors with fewer active tasks).
    """

    caps: Sequence[int]
    base: Sequence[int]
    bias: Sequence[int]

    @classmethod
    def plain(cls, caps: Sequence[int], bias: Sequence[int] | None = None) -> _Scale:
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


def _best_band(counts: Sequence[int], scale: _Scale, total: int, factor: int) -> Fraction:
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


def _settle(n: list[int], lo: Sequence[int], hi: Sequence[int], scale: _Scale,
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


def _targets(counts: Sequence[int], scale: _Scale, total: int, factor: int) -> list[int]:
    """Balanced counts (within ``factor`` per capacity) that keep the most tasks in place."""
    if total == 0:
        return [0] * len(counts)
    lo, hi = scale.bounds(_best_band(counts, scale, total, factor), factor)
    n = [min(max(k, a), b) for k, a, b in zip(counts, lo, hi, strict=True)]
    _settle(n, lo, hi, scale, total)
    return n


class _LoadHeap:
    """Processors by (at or above target, when targets are given; slot rank), lazily updated.

    Why: picking the balanced home for each of 10,000 tasks by scanning 500 processors
    would be 5 million steps; a heap makes each pick O(log P).
    """

    def __init__(self, scale: _Scale, load: list[int], targets: Sequence[int] | None) -> None:
        self.scale, self.load, self.targets = scale, load, targets
        self._keys = [self._rank(i) for i in range(len(load))]
        self._heap = list(self._keys)
        heapq.heapify(self._heap)

    def _rank(self, i: int) -> _Key:
        n = self.load[i]
        full = self.targets is not None and n >= self.targets[i]
        return (int(full), *self.scale.unit(i, n + 1))

    def key(self, i: int) -> _Key:
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


# --- active tasks -------------------------------------------------------------------------------

@dataclass
class _Plan:
    """The actives (and warmups) of one class of tasks, while they are being decided."""

    owner: dict[str, int]
    targets: list[int]
    warmup: dict[str, int] = field(default_factory=dict)


def _plan_class(view: _View, names: Sequence[str], scale: _Scale, stateful: bool) -> _Plan:
    """Orphan placement, targets, then the moves of one class (stateful or stateless).

    Orphans are placed before the targets are computed, so that the targets count them
    where they landed (on the least lagging processor) instead of moving them again.
    """
    owner = {t: view.holder[t] for t in names if t in view.holder}
    load = [0] * len(view.procs)
    for i in owner.values():
        load[i] += 1
    heap = _LoadHeap(scale, load, None)
    for name in names:
        if name not in owner:
            owner[name] = _orphan_home(view, heap, name) if stateful else _best(heap)
            heap.add(owner[name])
    plan = _Plan(owner, _targets(load, scale, len(names), view.config.balance_factor))
    excess = [max(0, n - t) for n, t in zip(load, plan.targets, strict=True)]
    deficit = [max(0, t - n) for n, t in zip(load, plan.targets, strict=True)]
    if stateful:
        moved = _move_caught_up(view, owner, excess, deficit)
        plan.warmup = _start_warmups(view, owner, moved, excess, deficit)
    else:
        _move_freely(owner, excess, deficit)
    return plan


def _best(heap: _LoadHeap, excluded: Iterable[int] = ()) -> int:
    """The heap's best processor; there is always one when nothing is excluded."""
    found = heap.best(excluded)
    assert found is not None
    return found


def _orphan_home(view: _View, heap: _LoadHeap, name: str) -> int:
    """The most caught-up processor (least lag) for a task without an owner.

    Equal lags (unknown ones included) go to the lightest load, then the lowest id.
    """
    best = _best(heap)
    best_key: _Key = (_INF, *heap.key(best))
    for i, lag in view.lags.get(name, ()):
        key: _Key = (lag, *heap.key(i))
        if key < best_key:
            best, best_key = i, key
    return best


def _candidate_edges(view: _View, owner: Mapping[str, int], deficit: Sequence[int],
                     caught_up: bool) -> list[tuple[float, float, str, int]]:
    """(priority, lag, task, target) for each reported lag of a below-target processor.

    Previous warmups rank first: finishing them is what converges. Then tasks placed in
    this call (moving one on is no real move), then the rest.
    """
    edges: list[tuple[float, float, str, int]] = []
    for j, proc in enumerate(view.procs):
        if deficit[j] == 0:
            continue
        for name, lag in proc.lags.items():
            i = owner.get(name)
            if i is not None and i != j and (lag <= view.config.acceptable_lag) == caught_up:
                rank = 0 if name in proc.warmup else 1 if name not in view.holder else 2
                edges.append((rank, lag, name, j))
    edges.sort()
    return edges


def _move_caught_up(view: _View, owner: dict[str, int], excess: list[int],
                    deficit: list[int]) -> set[str]:
    """Move excess tasks to below-target processors already caught up on them."""
    moved: set[str] = set()
    for _, _, name, j in _candidate_edges(view, owner, deficit, caught_up=True):
        i = owner[name]
        if name not in moved and excess[i] > 0 and deficit[j] > 0:
            owner[name] = j
            moved.add(name)
            excess[i] -= 1
            deficit[j] -= 1
    return moved


def _start_warmups(view: _View, owner: Mapping[str, int], moved: set[str], excess: list[int],
                   deficit: list[int]) -> dict[str, int]:
    """Warm up the remaining excess, at most ``max_warmups``; each reserves one move.

    Order: warmups in progress (least lag first), then partially caught-up replicas,
    then the task names of the most loaded processor to the least loaded one.
    """
    budget = view.config.max_warmups
    warm: dict[str, int] = {}

    def take(name: str, j: int) -> None:
        i = owner[name]
        if len(warm) < budget and name not in moved and name not in warm and i != j \
                and excess[i] > 0 and deficit[j] > 0:
            warm[name] = j
            excess[i] -= 1
            deficit[j] -= 1

    running = sorted((view.lag(j, t), t, j) for j, p in enumerate(view.procs)
                     for t in p.warmup if t in owner)
    for _, name, j in running:
        take(name, j)
    for _, _, name, j in _candidate_edges(view, owner, deficit, caught_up=False):
        take(name, j)
    queues: dict[int, list[str]] = {}
    while len(warm) < budget and any(excess):
        i = min(range(len(excess)), key=lambda k: (-excess[k], k))
        j = min(range(len(deficit)), key=lambda k: (-deficit[k], k))
        if i not in queues:
            queues[i] = sorted((t for t, o in owner.items() if o == i), reverse=True)
        name = queues[i].pop()
        take(name, j)
    return warm


def _move_freely(owner: dict[str, int], excess: list[int], deficit: list[int]) -> None:
    """Stateless excess moves at once: the last task names of each above-target processor."""
    by_owner: dict[int, list[str]] = defaultdict(list)
    for name in sorted(owner):
        by_owner[owner[name]].append(name)
    leaving = sorted(t for i, e in enumerate(excess) if e for t in by_owner[i][-e:])
    homes = [j for j, d in enumerate(deficit) for _ in range(d)]
    for name, j in zip(leaving, homes, strict=True):
        owner[name] = j


# --- standbys -----------------------------------------------------------------------------------

def _plan_standbys(view: _View, names: Sequence[str], plan: _Plan,
                   active: Sequence[int]) -> dict[str, list[int]]:
    """Standby holders per stateful task: sticky, spread, never beside the active/warmup."""
    count = view.config.num_standbys
    procs = len(view.procs)
    if count == 0 or procs < 2:
        return {}

    def busy(name: str) -> set[int]:
        return {plan.owner[name], plan.warmup.get(name, plan.owner[name])}

    want = {t: min(count, procs - len(busy(t))) for t in names}
    previous: dict[str, list[int]] = defaultdict(list)
    for j, proc in enumerate(view.procs):
        for name in proc.standby:
            if name in want and j not in busy(name):
                previous[name].append(j)
    kept = {t: sorted(previous[t], key=lambda j: (view.lag(j, t), j))[:want[t]] for t in names}
    load = [0] * procs
    for holders in kept.values():
        for j in holders:
            load[j] += 1
    scale = _Scale.plain(view.caps, bias=active)
    targets = _targets(load, scale, sum(want.values()), view.config.balance_factor)
    _drop_over_target(view, kept, load, targets)
    heap = _LoadHeap(scale, load, targets)
    for name in names:
        while len(kept[name]) < want[name]:
            j = _standby_home(view, heap, name, busy(name) | set(kept[name]))
            kept[name].append(j)
            heap.add(j)
    return kept


def _drop_over_target(view: _View, kept: dict[str, list[int]], load: list[int],
                      targets: Sequence[int]) -> None:
    """Drop kept standbys above a processor's target, the most lagging first."""
    held: dict[int, list[tuple[float, str]]] = defaultdict(list)
    for name, holders in kept.items():
        for j in holders:
            held[j].append((-view.lag(j, name), name))
    for j in sorted(held):
        for _, name in sorted(held[j])[:max(0, load[j] - targets[j])]:
            kept[name].remove(j)
            load[j] -= 1


def _standby_home(view: _View, heap: _LoadHeap, name: str, excluded: set[int]) -> int:
    """Where a new standby of ``name`` goes: below target, warm (old owner), least lag."""
    best = _best(heap, excluded)
    best_key: _Key = (heap.key(best)[0], 2, _INF, *heap.key(best)[1:])
    candidates = list(view.lags.get(name, ()))
    old = view.holder.get(name)
    if old is not None:
        candidates.append((old, 0))
    for i, lag in candidates:
        if i in excluded:
            continue
        rank = 0 if i == old else 1 if view.caught_up(i, name, lag) else 2
        key: _Key = (heap.key(i)[0], rank, lag, *heap.key(i)[1:])
        if key < best_key:
            best, best_key = i, key
    return best


# --- the entry point ----------------------------------------------------------------------------

def assign(tasks: Iterable[TaskInfo], processors: Iterable[ProcessorSnapshot],
           config: AssignmentConfig | None = None) -> Assignment:
    """Compute the next assignment from the previous one and the reported lags.

    Args:
        tasks: every task of the job; roles of tasks not listed here are dropped.
        processors: the live processors with their previous roles and lags.
        config: the ``[catch_up]`` settings; defaults to ``AssignmentConfig()``.

    Returns:
        Roles per processor (sorted by id) and whether a follow-up call is needed. With
        no processors, nothing can run: the result is empty.

    Raises:
        AssignmentError: duplicate task names or processor ids, or a task active on two
            processors.
    """
    view = _View(tasks, processors, config or AssignmentConfig())
    if not view.procs:
        return Assignment((), follow_up=False)
    stateful = [t.name for t in view.tasks if t.stateful]
    stateless = [t.name for t in view.tasks if not t.stateful]
    main = _plan_class(view, stateful, _Scale.plain(view.caps), stateful=True)
    zeros = [0] * len(view.procs)
    free = _plan_class(view, stateless, _Scale(view.caps, main.targets, zeros), stateful=False)
    standby = _plan_standbys(view, stateful, main,
                             [a + b for a, b in zip(main.targets, free.targets, strict=True)])
    roles: list[dict[str, list[str]]] = [
        {"active": [], "warmup": [], "standby": []} for _ in view.procs]
    for name, i in (main.owner | free.owner).items():
        roles[i]["active"].append(name)
    for name, j in main.warmup.items():
        roles[j]["warmup"].append(name)
    for name, holders in standby.items():
        for j in holders:
            roles[j]["standby"].append(name)
    return Assignment(
        tuple(ProcessorAssignment(p.id, *(tuple(sorted(r[k])) for k in ("active", "warmup",
                                                                         "standby")))
              for p, r in zip(view.procs, roles, strict=True)),
        follow_up=bool(main.warmup))


def active_moves(previous: Iterable[ProcessorSnapshot], result: Assignment) -> tuple[Move, ...]:
    """The active tasks whose processor changed, by task name (placements included)."""
    before = {t: p.id for p in previous for t in p.active}
    return tuple(Move(t, before.get(t), pid) for t, pid in sorted(result.owners().items())
                 if before.get(t) != pid)


# --- the scenario document (``baton assign --scenario``) ----------------------------------------

_TASK_KEYS = frozenset({"name", "stateful"})
_PROCESSOR_KEYS = frozenset({"id", "capacity", "active", "standby", "warmup", "lags"})
_CONFIG_KEYS = frozenset({"acceptable_lag", "max_warmups", "num_standbys", "balance_factor"})
_ROLES = ("active", "standby", "warmup")


def scenario_from_json(text: str) -> Scenario:
    """Parse a scenario document from JSON text.

    Raises:
        ScenarioError: invalid JSON (path ``line L column C``) or an invalid document.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"line {exc.lineno} column {exc.colno}",
                            f"invalid JSON: {exc.msg}") from exc
    return parse_scenario(data)


def parse_scenario(data: object) -> Scenario:
    """Validate a decoded scenario document; missing optional fields get their defaults.

    Raises:
        ScenarioError: the first problem found; ``path`` names the key, such as
            ``processors[2].lags.t1`` or ``config.max_warmups``.
    """
    root = _object(data, "scenario", None)
    tasks = tuple(_parse_task(raw, f"tasks[{k}]")
                  for k, raw in enumerate(_list(_required(root, "tasks", ""), "tasks")))
    known: dict[str, bool] = {}
    for k, task in enumerate(tasks):
        if task.name in known:
            raise ScenarioError(f"tasks[{k}].name", f"duplicate task {task.name!r}")
        known[task.name] = task.stateful
    raw_procs = _list(_required(root, "processors", ""), "processors")
    processors = tuple(_parse_processor(raw, f"processors[{k}]", known)
                       for k, raw in enumerate(raw_procs))
    _check_processors(processors)
    config = _parse_config(root.get("config", {}))
    return Scenario(tasks, processors, config)


def _parse_task(raw: object, path: str) -> TaskInfo:
    """One ``{"name", "stateful"}`` entry."""
    obj = _object(raw, path, _TASK_KEYS)
    stateful = obj.get("stateful", True)
    if not isinstance(stateful, bool):
        raise ScenarioError(f"{path}.stateful", f"expected true or false, got {stateful!r}")
    return TaskInfo(_name(_required(obj, "name", path), f"{path}.name"), stateful)


def _parse_processor(raw: object, path: str, known: Mapping[str, bool]) -> ProcessorSnapshot:
    """One processor entry: its roles must name known tasks, one role per task."""
    obj = _object(raw, path, _PROCESSOR_KEYS)
    pid = _name(_required(obj, "id", path), f"{path}.id")
    roles: dict[str, frozenset[str]] = {}
    for role in _ROLES:
        names: list[str] = []
        for k, raw_name in enumerate(_list(obj.get(role, []), f"{path}.{role}")):
            where = f"{path}.{role}[{k}]"
            name = _known(_name(raw_name, where), where, known)
            if name in names:
                raise ScenarioError(where, f"task {name!r} is listed twice")
            for other, held in roles.items():
                if name in held:
                    raise ScenarioError(where, f"task {name!r} is also {other} on {pid!r}; "
                                               f"a processor holds one role per task")
            names.append(name)
        roles[role] = frozenset(names)
    lags: dict[str, int] = {}
    for name, lag in _object(obj.get("lags", {}), f"{path}.lags", None).items():
        _known(name, f"{path}.lags", known)
        if lag is not None:  # null: not reported, the same as leaving it out
            lags[name] = _int(lag, f"{path}.lags.{name}", 0)
    capacity = _int(obj.get("capacity", 1), f"{path}.capacity", 1)
    return ProcessorSnapshot(pid, capacity, roles["active"], roles["standby"], roles["warmup"],
                          lags)


def _check_processors(processors: Sequence[ProcessorSnapshot]) -> None:
    """Processor ids are unique and every task has at most one active owner."""
    ids: dict[str, int] = {}
    owners: dict[str, str] = {}
    for k, proc in enumerate(processors):
        if proc.id in ids:
            raise ScenarioError(f"processors[{k}].id", f"duplicate processor id {proc.id!r} "
                                                       f"(also processors[{ids[proc.id]}])")
        ids[proc.id] = k
        for name in sorted(proc.active):
            if name in owners:
                raise ScenarioError(f"processors[{k}].active",
                                    f"task {name!r} is already active on {owners[name]!r}; "
                                    f"a task has one active owner")
            owners[name] = proc.id


def _parse_config(raw: object) -> AssignmentConfig:
    """The ``config`` object; every key is optional."""
    obj = _object(raw, "config", _CONFIG_KEYS)
    defaults = AssignmentConfig()
    low = {"acceptable_lag": 0, "max_warmups": 1, "num_standbys": 0, "balance_factor": 1}
    values = {key: _int(obj.get(key, getattr(defaults, key)), f"config.{key}", low[key])
              for key in sorted(_CONFIG_KEYS)}
    return AssignmentConfig(**values)


def _required(obj: Mapping[str, object], key: str, path: str) -> object:
    """``obj[key]``, or an error naming the missing key."""
    if key not in obj:
        where = f"{path}.{key}" if path else key
        raise ScenarioError(where, "missing required key")
    return obj[key]


def _object(value: object, path: str, keys: frozenset[str] | None) -> dict[str, object]:
    """A JSON object; with ``keys``, unknown keys are refused (a typo must not pass)."""
    if not isinstance(value, dict):
        raise ScenarioError(path, f"expected a JSON object, got {_kind(value)}")
    for key in value:
        if keys is not None and key not in keys:
            raise ScenarioError(f"{path}.{key}", f"unknown key; expected one of "
                                                 f"{', '.join(sorted(keys))}")
    return value


def _list(value: object, path: str) -> list[object]:
    """A JSON array."""
    if not isinstance(value, list):
        raise ScenarioError(path, f"expected a JSON array, got {_kind(value)}")
    return value


def _name(value: object, path: str) -> str:
    """A non-empty string (a task name or a processor id)."""
    if not isinstance(value, str) or not value:
        raise ScenarioError(path, f"expected a non-empty string, got {_kind(value)}")
    return value


def _known(name: str, path: str, known: Mapping[str, bool]) -> str:
    """Refuse a task name that is not in ``tasks``: most likely a typo."""
    if name not in known:
        raise ScenarioError(path, f"unknown task {name!r}: not in 'tasks'")
    return name


def _int(value: object, path: str, low: int) -> int:
    """An integer at least ``low`` (JSON true/false and 1.5 are refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ScenarioError(path, f"expected an integer >= {low}, got {_kind(value)}")
    return value


def _kind(value: object) -> str:
    """A value as the error shows it: the JSON literal when short, else its JSON type."""
    text = json.dumps(value) if isinstance(value, str | int | float | bool | None) else ""
    if text and len(text) <= 40:
        return text
    if isinstance(value, dict):
        return "an object"
    return "an array" if isinstance(value, list) else "a long string"


def format_assignment(result: Assignment) -> dict[str, Any]:
    """The pinned ``baton assign --json`` document."""
    return {"processors": [{"id": p.id, "active": list(p.active), "warmup": list(p.warmup),
                            "standby": list(p.standby)} for p in result.processors],
            "follow_up": result.follow_up}


def format_scenario(scenario: Scenario) -> dict[str, Any]:
    """A scenario as the document ``parse_scenario`` reads (lists and keys sorted)."""
    config = scenario.config
    return {
        "tasks": [{"name": t.name, "stateful": t.stateful} for t in scenario.tasks],
        "processors": [{"id": p.id, "capacity": p.capacity, "active": sorted(p.active),
                        "standby": sorted(p.standby), "warmup": sorted(p.warmup),
                        "lags": dict(sorted(p.lags.items()))} for p in scenario.processors],
        "config": {"acceptable_lag": config.acceptable_lag, "max_warmups": config.max_warmups,
                   "num_standbys": config.num_standbys,
                   "balance_factor": config.balance_factor},
    }
