"""What the assignor's tests share: jobs, processors, reading results, converging, and
the minimal number of moves (brute force)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction

from orchestrator.core.assignment import (
    Assignment,
    AssignmentConfig,
    ProcessorSnapshot,
    TaskInfo,
    assign,
    owner_changes,
)

# --- helpers ---------------------------------------------------------------------------------


def tasks(count: int, prefix: str = "t", stateful: bool = True) -> list[TaskInfo]:
    return [TaskInfo(f"{prefix}{k:02d}", stateful) for k in range(count)]


def proc(pid: str, active: Sequence[str] = (), standby: Sequence[str] = (),
         warmup: Sequence[str] = (), lags: Mapping[str, int] | None = None,
         capacity: int = 1) -> ProcessorSnapshot:
    return ProcessorSnapshot(pid, capacity, frozenset(active), frozenset(standby),
                          frozenset(warmup), dict(lags or {}))


def roles(result: Assignment, role: str) -> dict[str, tuple[str, ...]]:
    return {p.id: getattr(p, role) for p in result.processors}


def counts(result: Assignment) -> dict[str, int]:
    return {p.id: len(p.active) for p in result.processors}


def feed_back(previous: Sequence[ProcessorSnapshot], result: Assignment) -> list[ProcessorSnapshot]:
    """The next call's input: the result as previous roles, warmups caught up (lag 0)."""
    by_id = {p.id: p for p in previous}
    return [proc(p.id, p.active, p.standby, p.warmup,
                 dict(by_id[p.id].lags) | {t: 0 for t in p.warmup}, by_id[p.id].capacity)
            for p in result.processors]


def converge(job: Sequence[TaskInfo], procs: Sequence[ProcessorSnapshot],
             config: AssignmentConfig, limit: int = 500) -> list[tuple[Assignment, int]]:
    """Call assign until follow_up is false; each call's result and its active moves."""
    calls = []
    for _ in range(limit):
        result = assign(job, procs, config)
        calls.append((result, sum(m.source is not None for m in owner_changes(procs, result))))
        if not result.follow_up:
            return calls
        procs = feed_back(procs, result)
    raise AssertionError(f"no convergence in {limit} calls")


def spread(load: Mapping[str, int], caps: Mapping[str, int]) -> Fraction:
    """Most minus least loaded, per unit of capacity."""
    per_unit = [Fraction(load.get(p, 0), c) for p, c in caps.items()]
    return max(per_unit) - min(per_unit)


def min_moves(held: Mapping[str, int], caps: Mapping[str, int], total: int,
              factor: int) -> int:
    """Brute force: the fewest tasks to move to reach some balanced count vector."""
    ids = sorted(caps)

    def vectors(k: int, left: int) -> Iterator[tuple[int, ...]]:
        if k == len(ids) - 1:
            yield (left,)
            return
        for n in range(left + 1):
            for rest in vectors(k + 1, left - n):
                yield (n, *rest)

    best = None
    for vec in vectors(0, total):
        if spread(dict(zip(ids, vec, strict=True)), caps) <= factor:
            cost = sum(max(0, held.get(p, 0) - n) for p, n in zip(ids, vec, strict=True))
            best = cost if best is None else min(best, cost)
    assert best is not None
    return best


TWO_TO_THREE = tasks(99)
EVEN = [t.name for t in TWO_TO_THREE[0::2]]
ODD = [t.name for t in TWO_TO_THREE[1::2]]
