"""Active tasks: keep them where they are caught up, move them only to caught-up
processors, warm up the rest (at most `max_warmups`), place orphans."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.core.assignment.balance import LoadHeap, Scale, balanced_targets
from orchestrator.core.assignment.model import INF, Key, View
from orchestrator.wire.catchup import is_caught_up

__all__ = ["Plan", "least_loaded", "plan_class"]


@dataclass
class Plan:
    """The actives (and warmups) of one class of tasks, while they are being decided."""

    owner: dict[str, int]
    targets: list[int]
    warmup: dict[str, int] = field(default_factory=dict)



def plan_class(view: View, names: Sequence[str], scale: Scale, stateful: bool) -> Plan:
    """Orphan placement, targets, then the moves of one class (stateful or stateless).

    Orphans are placed before the targets are computed, so that the targets count them
    where they landed (on the least lagging processor) instead of moving them again.
    """
    owner = {t: view.holder[t] for t in names if t in view.holder}
    if stateful:
        _caught_up_over_restoring(view, owner)
    load = [0] * len(view.procs)
    for i in owner.values():
        load[i] += 1
    heap = LoadHeap(scale, load, None)
    for name in names:
        if name not in owner:
            owner[name] = _orphan_home(view, heap, name) if stateful else least_loaded(heap)
            heap.add(owner[name])
    plan = Plan(owner, balanced_targets(load, scale, len(names), view.config.balance_factor))
    excess = [max(0, n - t) for n, t in zip(load, plan.targets, strict=True)]
    deficit = [max(0, t - n) for n, t in zip(load, plan.targets, strict=True)]
    if stateful:
        moved = _move_caught_up(view, owner, excess, deficit)
        plan.warmup = _start_warmups(view, owner, moved, excess, deficit)
    else:
        _move_freely(owner, excess, deficit)
    return plan



def _caught_up_over_restoring(view: View, owner: dict[str, int]) -> None:
    """KIP-441: an owner that reports a lag above `acceptable_lag` on its own task (it
    is restoring) gives the task to the least lagging processor that is caught up on
    it, such as a hot standby: the task runs again sooner than the owner would."""
    acceptable = view.config.acceptable_lag
    for name, i in owner.items():
        own = view.procs[i].lags.get(name)
        if own is None or is_caught_up(own, acceptable):
            continue
        ready = [(lag, j) for j, lag in view.lags.get(name, ())
                 if j != i and is_caught_up(lag, acceptable)]
        if ready:
            owner[name] = min(ready)[1]



def least_loaded(heap: LoadHeap, excluded: Iterable[int] = ()) -> int:
    """The heap's best processor; there is always one when nothing is excluded."""
    found = heap.best(excluded)
    assert found is not None
    return found



def _orphan_home(view: View, heap: LoadHeap, name: str) -> int:
    """The most caught-up processor (least lag) for a task without an owner.

    Equal lags (unknown ones included) go to the lightest load, then the lowest id.
    """
    allowed = heap.best(view.excluded.get(name, ()))
    best = allowed if allowed is not None else least_loaded(heap)
    best_key: Key = (INF, *heap.key(best))
    for i, lag in view.lags.get(name, ()):
        key: Key = (lag, *heap.key(i))
        if key < best_key:
            best, best_key = i, key
    return best



def _candidate_edges(view: View, owner: Mapping[str, int], deficit: Sequence[int],
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
            if name in proc.excluded:
                continue
            i = owner.get(name)
            close = is_caught_up(lag, view.config.acceptable_lag)
            if i is not None and i != j and close == caught_up:
                rank = 0 if name in proc.warmup else 1 if name not in view.holder else 2
                edges.append((rank, lag, name, j))
    edges.sort()
    return edges



def _move_caught_up(view: View, owner: dict[str, int], excess: list[int],
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



def _start_warmups(view: View, owner: Mapping[str, int], moved: set[str], excess: list[int],
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
                and excess[i] > 0 and deficit[j] > 0 and j not in view.excluded.get(name, ()):
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
        if not queues[i]:       # every task left there is excluded where it could go
            excess[i] = 0
            continue
        take(queues[i].pop(), j)
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
