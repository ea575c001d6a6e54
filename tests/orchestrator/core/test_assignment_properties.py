"""The assignor over random and exhaustive small clusters: invariants, determinism,
convergence, minimal moves."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.assignment import (
    Assignment,
    AssignmentConfig,
    ProcessorSnapshot,
    TaskInfo,
    assign,
)
from tests.orchestrator.core.assignment_support import (
    converge,
    counts,
    feed_back,
    min_moves,
    proc,
    spread,
    tasks,
)

# --- property tests over random clusters -------------------------------------------------------

@st.composite
def clusters(draw: st.DrawFn, max_tasks: int = 24, max_procs: int = 5
             ) -> tuple[list[TaskInfo], list[ProcessorSnapshot], AssignmentConfig]:
    """Random jobs and processors: owners (some gone), standbys, warmups, partial lags."""
    count = draw(st.integers(0, max_tasks))
    job = [TaskInfo(f"t{k:02d}", draw(st.booleans()) or draw(st.booleans()))
           for k in range(count)]
    ids = [f"p{k}" for k in range(draw(st.integers(1, max_procs)))]
    owner = {t.name: draw(st.sampled_from([*ids, None])) for t in job}
    procs = []
    for pid in ids:
        mine = {t for t, o in owner.items() if o == pid}
        others = [t.name for t in job if t.name not in mine]
        standby = draw(st.sets(st.sampled_from(others))) if others else set()
        warmup = draw(st.sets(st.sampled_from(others))) if others else set()
        lags = draw(st.dictionaries(st.sampled_from([t.name for t in job]),
                                    st.integers(0, 3000))) if job else {}
        procs.append(proc(pid, sorted(mine), sorted(standby), sorted(warmup - standby), lags,
                          draw(st.integers(1, 3))))
    config = AssignmentConfig(acceptable_lag=draw(st.sampled_from([0, 500, 1000])),
                              max_warmups=draw(st.integers(1, 3)),
                              num_standbys=draw(st.integers(0, 2)),
                              balance_factor=draw(st.integers(1, 2)))
    return job, procs, config


def check_invariants(job: Sequence[TaskInfo], procs: Sequence[ProcessorSnapshot],
                     config: AssignmentConfig, result: Assignment) -> None:
    stateful = {t.name: t.stateful for t in job}
    by_id = {p.id: p for p in procs}
    before = {t: p.id for p in procs for t in p.active}
    assert [p.id for p in result.processors] == sorted(by_id)
    actives = Counter(t for p in result.processors for t in p.active)
    assert actives == Counter(list(stateful))  # each task exactly one active
    owners = result.owners()

    def caught_up(pid: str, task: str) -> bool:
        lag = by_id[pid].lags.get(task)
        return before.get(task) == pid or (lag is not None and lag <= config.acceptable_lag)

    for task, pid in owners.items():
        if stateful[task] and not caught_up(pid, task):
            assert task not in before  # only a new or orphaned task...
            assert not any(caught_up(p, task) for p in by_id)  # ...nobody was caught up on
    warm = [(t, p.id) for p in result.processors for t in p.warmup]
    assert len(warm) <= config.max_warmups
    assert len({t for t, _ in warm}) == len(warm)
    assert result.follow_up == bool(warm)
    for task, pid in warm:
        assert stateful[task] and owners[task] != pid
    for p in result.processors:
        assert len(set(p.standby)) == len(p.standby)
        assert not set(p.standby) & (set(p.active) | set(p.warmup))
        assert all(stateful[t] for t in p.standby)
    warm_on = dict(warm)
    for task in stateful:
        holders = [p.id for p in result.processors if task in p.standby]
        busy = 1 + (task in warm_on)
        want = min(config.num_standbys, len(procs) - busy) if stateful[task] else 0
        assert len(holders) == want


def shuffled(procs: Sequence[ProcessorSnapshot], seed: int) -> list[ProcessorSnapshot]:
    rng = random.Random(seed)
    out = []
    for p in procs:
        items = list(p.lags.items())
        rng.shuffle(items)
        out.append(proc(p.id, sorted(p.active, reverse=True), list(p.standby),
                        list(p.warmup), dict(items), p.capacity))
    rng.shuffle(out)
    return out


@settings(max_examples=200, deadline=None)
@given(clusters(), st.integers(0, 2**32))
def test_invariants_and_determinism(
        cluster: tuple[list[TaskInfo], list[ProcessorSnapshot], AssignmentConfig],
        seed: int) -> None:
    job, procs, config = cluster
    result = assign(job, procs, config)
    check_invariants(job, procs, config, result)
    assert assign(job, procs, config) == result
    other_job = list(job)
    random.Random(seed).shuffle(other_job)
    assert assign(other_job, shuffled(procs, seed), config) == result


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_convergence_balance_and_minimal_moves(
        cluster: tuple[list[TaskInfo], list[ProcessorSnapshot], AssignmentConfig]) -> None:
    job, procs, config = cluster
    calls = converge(job, procs, config)
    state = procs
    for result, _ in calls:
        check_invariants(job, state, config, result)
        state = feed_back(state, result)
    # The bound: after the first call, every call promotes max_warmups warmups or more.
    later = sum(moves for _, moves in calls[1:])
    assert len(calls) <= math.ceil(later / config.max_warmups) + 1
    final = calls[-1][0]
    caps = {p.id: p.capacity for p in procs}
    stateful = {t.name for t in job if t.stateful}
    load = Counter(p.id for p in final.processors for t in p.active if t in stateful)
    assert spread(load, caps) <= config.balance_factor
    assert spread(counts(final), caps) <= config.balance_factor
    # From the first call's result on, no task is orphaned: moves are exactly the minimum.
    after_first = feed_back(procs, calls[0][0])
    held = Counter(p.id for p in after_first for t in p.active if t in stateful)
    if len(caps) <= 4 and len(stateful) <= 16:
        assert later == min_moves(held, caps, len(stateful), config.balance_factor)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=4), st.data(), st.integers(1, 3))
def test_without_orphans_total_moves_are_the_brute_force_minimum(
        capacities: list[int], data: st.DataObject, factor: int) -> None:
    ids = [f"p{k}" for k in range(len(capacities))]
    job = tasks(data.draw(st.integers(0, 14)))
    owner = {t.name: data.draw(st.sampled_from(ids)) for t in job}
    procs = [proc(pid, [t for t, o in owner.items() if o == pid], capacity=c)
             for pid, c in zip(ids, capacities, strict=True)]
    config = AssignmentConfig(balance_factor=factor, max_warmups=data.draw(st.integers(1, 4)))
    calls = converge(job, procs, config)
    caps = dict(zip(ids, capacities, strict=True))
    assert sum(m for _, m in calls) == min_moves(Counter(owner.values()), caps, len(job), factor)
    assert calls[0][1] == 0  # no lags reported: nothing is caught up, nothing moves at once
    assert len(calls) <= math.ceil(sum(m for _, m in calls) / config.max_warmups) + 1


def test_property_strategies_reach_interesting_cases() -> None:
    """Guard against a vacuous strategy: the shapes above do occur."""
    job = tasks(10) + tasks(2, prefix="s", stateful=False)
    before = [proc("p0", [t.name for t in job[:8]], lags={"t09": 0}, capacity=2),
              proc("p1", ["t08"], ["t00"], ["t01"], {"t01": 10}), proc("p2")]
    config = AssignmentConfig(num_standbys=1, max_warmups=1)
    calls = converge(job, before, config)
    assert len(calls) > 2
    check_invariants(job, before, config, calls[0][0])


def test_all_combinations_of_small_clusters_are_deterministic() -> None:
    """Every owner layout of 4 tasks on 3 processors: the result ignores input order."""
    job = tasks(4)
    for layout in itertools.product(["p0", "p1", "p2", None], repeat=4):
        procs = [proc(pid, [t.name for t, o in zip(job, layout, strict=True) if o == pid])
                 for pid in ("p0", "p1", "p2")]
        assert assign(job, procs) == assign(job[::-1], procs[::-1])
