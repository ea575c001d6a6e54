"""Standbys: `num_standbys` replicas per stateful task, never beside its active,
preferring processors that already hold the task's state."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from orchestrator.core.assignment.actives import Plan, least_loaded
from orchestrator.core.assignment.balance import LoadHeap, Scale, balanced_targets
from orchestrator.core.assignment.model import INF, Key, View

__all__ = ["plan_standbys"]


def plan_standbys(view: View, names: Sequence[str], plan: Plan,
                  active: Sequence[int]) -> dict[str, list[int]]:
    """Standby holders per stateful task: sticky, spread, never beside the active/warmup."""
    count = view.config.num_standbys
    procs = len(view.procs)
    if count == 0 or procs < 2:
        return {}

    def busy(name: str) -> set[int]:
        owners = {plan.owner[name], plan.warmup.get(name, plan.owner[name])}
        return owners | view.excluded.get(name, set())

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
    scale = Scale.plain(view.caps, bias=active)
    targets = balanced_targets(load, scale, sum(want.values()), view.config.balance_factor)
    _drop_over_target(view, kept, load, targets)
    heap = LoadHeap(scale, load, targets)
    for name in names:
        while len(kept[name]) < want[name]:
            j = _standby_home(view, heap, name, busy(name) | set(kept[name]))
            kept[name].append(j)
            heap.add(j)
    return kept



def _drop_over_target(view: View, kept: dict[str, list[int]], load: list[int],
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



def _standby_home(view: View, heap: LoadHeap, name: str, excluded: set[int]) -> int:
    """Where a new standby of ``name`` goes: below target, warm (old owner), least lag."""
    best = least_loaded(heap, excluded)
    best_key: Key = (heap.key(best)[0], 2, INF, *heap.key(best)[1:])
    candidates = list(view.lags.get(name, ()))
    old = view.holder.get(name)
    if old is not None:
        candidates.append((old, 0))
    for i, lag in candidates:
        if i in excluded:
            continue
        rank = 0 if i == old else 1 if view.caught_up(i, name, lag) else 2
        key: Key = (heap.key(i)[0], rank, lag, *heap.key(i)[1:])
        if key < best_key:
            best, best_key = i, key
    return best
