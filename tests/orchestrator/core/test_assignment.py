"""The lag-aware assignor (after KIP-441): table tests of each rule, property tests over
random clusters (invariants, determinism, convergence, minimal moves), and `baton assign`."""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.cli.assign import assign_command
from orchestrator.cli.scenario import (
    Scenario,
    ScenarioError,
    format_assignment,
    format_scenario,
    parse_scenario,
    scenario_from_json,
)
from orchestrator.core.assignment import (
    Assignment,
    AssignmentConfig,
    AssignmentError,
    ProcessorSnapshot,
    TaskInfo,
    active_moves,
    assign,
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
        calls.append((result, sum(m.source is not None for m in active_moves(procs, result))))
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


# --- caught up, lag and warmups ---------------------------------------------------------------

def test_unknown_lag_is_never_caught_up_so_the_newcomer_gets_a_warmup() -> None:
    result = assign(tasks(2), [proc("p1", ["t00", "t01"]), proc("p2")])
    assert roles(result, "active") == {"p1": ("t00", "t01"), "p2": ()}
    assert roles(result, "warmup") == {"p1": (), "p2": ("t00",)}
    assert result.follow_up


@pytest.mark.parametrize(("lag", "moves"), [(0, True), (1000, True), (1001, False)])
def test_a_processor_is_caught_up_when_lag_is_at_most_acceptable(lag: int, moves: bool) -> None:
    result = assign(tasks(2), [proc("p1", ["t00", "t01"]), proc("p2", lags={"t01": lag})])
    assert (result.owners()["t01"] == "p2") is moves
    assert result.follow_up is not moves
    if not moves:
        assert roles(result, "warmup")["p2"] == ("t01",)  # the partly caught-up one


def test_the_previous_owner_is_caught_up_whatever_its_lags_say() -> None:
    result = assign(tasks(1), [proc("p1", ["t00"], lags={"t00": 10**9}),
                               proc("p2", lags={"t00": 10**9})])
    assert result.owners() == {"t00": "p1"}
    assert not result.follow_up


def test_a_warmup_reporting_acceptable_lag_is_promoted_in_the_same_call() -> None:
    before = [proc("p1", ["t00", "t01"]), proc("p2", warmup=["t00"], lags={"t00": 7})]
    result = assign(tasks(2), before)
    assert result.owners() == {"t00": "p2", "t01": "p1"}
    assert roles(result, "warmup") == {"p1": (), "p2": ()}
    assert not result.follow_up


def test_a_warmup_in_progress_is_kept_rather_than_a_new_one_started() -> None:
    before = [proc("p1", ["t00", "t01", "t02", "t03"]),
              proc("p2", warmup=["t03"], lags={"t03": 50_000})]
    result = assign(tasks(4), before, AssignmentConfig(max_warmups=1))
    assert roles(result, "warmup")["p2"] == ("t03",)
    assert counts(result) == {"p1": 4, "p2": 0}


def test_max_warmups_bounds_the_whole_assignment() -> None:
    before = [proc("p1", [t.name for t in tasks(12)]), proc("p2"), proc("p3"), proc("p4")]
    for limit in (1, 2, 5):
        result = assign(tasks(12), before, AssignmentConfig(max_warmups=limit))
        assert sum(len(p.warmup) for p in result.processors) == limit
        assert counts(result)["p1"] == 12


def test_moves_prefer_processors_caught_up_on_the_task_such_as_a_standby() -> None:
    before = [proc("p1", ["t00", "t01", "t02", "t03"]),
              proc("p2", standby=["t02", "t03"], lags={"t02": 3, "t03": 0})]
    result = assign(tasks(4), before, AssignmentConfig(num_standbys=1))
    assert roles(result, "active") == {"p1": ("t00", "t01"), "p2": ("t02", "t03")}
    assert not result.follow_up
    assert roles(result, "standby") == {"p1": ("t02", "t03"), "p2": ("t00", "t01")}


def test_equal_lags_never_cause_a_move() -> None:
    job = tasks(6)
    before = [proc(f"p{k}", [f"t{2 * k:02d}", f"t{2 * k + 1:02d}"],
                   lags={t.name: 0 for t in job}) for k in range(3)]
    result = assign(job, before, AssignmentConfig(num_standbys=2))
    assert active_moves(before, result) == ()
    assert not result.follow_up


# --- new and orphaned tasks --------------------------------------------------------------------

def test_an_orphaned_task_goes_to_the_least_lagging_processor() -> None:
    before = [proc("p2", ["t00"], lags={"t01": 90_000}), proc("p3", lags={"t01": 20_000}),
              proc("p4", ["t02"])]
    result = assign(tasks(3), before)
    assert result.owners()["t01"] == "p3"  # nobody caught up: least lag, unknown is infinite


def test_an_orphan_prefers_a_caught_up_processor_then_the_least_lag() -> None:
    before = [proc("p2", lags={"t00": 900}), proc("p3", lags={"t00": 5}), proc("p4")]
    assert assign(tasks(1), before).owners() == {"t00": "p3"}


def test_an_orphan_on_a_caught_up_standby_is_taken_over_without_warmup() -> None:
    # p1 died; p2 kept standbys of its tasks.
    before = [proc("p2", ["t02", "t03"], ["t00", "t01"], lags={"t00": 0, "t01": 40}),
              proc("p3", ["t04", "t05"])]
    result = assign(tasks(6), before, AssignmentConfig(num_standbys=1))
    owners = result.owners()
    assert owners["t00"] == owners["t01"] == "p2"
    assert counts(result) == {"p2": 4, "p3": 2}
    assert result.follow_up  # p2 is two above target: warm up p3 for them


def test_a_fresh_cluster_is_balanced_at_once_by_name_order() -> None:
    result = assign(tasks(7), [proc("p1"), proc("p2"), proc("p3")])
    assert sorted(counts(result).values()) == [2, 2, 3]
    assert not result.follow_up
    assert sum(len(p.warmup) for p in result.processors) == 0


# --- balance and stickiness --------------------------------------------------------------------

def test_two_to_three_processors_with_99_tasks_moves_exactly_33() -> None:
    before = [proc("p1", EVEN), proc("p2", ODD), proc("p3")]
    config = AssignmentConfig()
    calls = converge(TWO_TO_THREE, before, config)
    first = calls[0][0]
    assert roles(first, "active")["p3"] == ()
    assert len(roles(first, "warmup")["p3"]) == min(config.max_warmups, 33)
    final = calls[-1][0]
    assert counts(final) == {"p1": 33, "p2": 33, "p3": 33}
    assert sum(moves for _, moves in calls) == 33
    assert len(calls) <= math.ceil(33 / config.max_warmups) + 1
    owners = final.owners()
    stayed = [t for t in EVEN if owners[t] == "p1"] + [t for t in ODD if owners[t] == "p2"]
    assert len(stayed) == 66  # every unmoved task is where it was


def test_scale_in_by_draining_moves_only_the_drained_tasks() -> None:
    job = tasks(12)
    before = [proc(f"p{k}", [t.name for t in job[3 * k: 3 * k + 3]]) for k in range(4)]
    result = assign(job, before[1:])  # p0 left: its 3 tasks are orphans
    assert counts(result) == {"p1": 4, "p2": 4, "p3": 4}
    assert {m.task for m in active_moves(before, result)} == {"t00", "t01", "t02"}


def test_capacity_weights_the_targets() -> None:
    result = assign(tasks(8), [proc("big", capacity=3), proc("small")])
    assert counts(result) == {"big": 6, "small": 2}


def test_balance_factor_is_the_allowed_spread_per_unit_of_capacity() -> None:
    before = [proc("p1", [t.name for t in tasks(5)]), proc("p2", ["u0", "u1", "u2"])]
    job = tasks(5) + [TaskInfo("u0"), TaskInfo("u1"), TaskInfo("u2")]
    lags = {t.name: 0 for t in job}
    before[1] = proc("p2", ["u0", "u1", "u2"], lags=lags)
    assert counts(assign(job, before, AssignmentConfig(balance_factor=2))) == {"p1": 5, "p2": 3}
    assert counts(assign(job, before, AssignmentConfig(balance_factor=1))) == {"p1": 4, "p2": 4}


def test_stateless_tasks_move_at_once_and_even_out_the_total() -> None:
    job = tasks(3) + tasks(3, prefix="s", stateful=False)
    before = [proc("p1", [t.name for t in job]), proc("p2")]
    first = assign(job, before)
    # Stateful targets are 2 + 1: t00 warms up on p2. Stateless tasks balance the total
    # against those targets (stable from call to call), so p2 takes two of them now.
    active = {"p1": ("s00", "t00", "t01", "t02"), "p2": ("s01", "s02")}
    assert roles(first, "active") == active
    assert roles(first, "warmup") == {"p1": (), "p2": ("t00",)}
    calls = converge(job, before, AssignmentConfig())
    assert counts(calls[-1][0]) == {"p1": 3, "p2": 3}
    assert sum(m for _, m in calls) == 3


def test_stateless_tasks_fill_in_beside_the_stateful_ones() -> None:
    job = tasks(3) + tasks(1, prefix="s", stateful=False)
    result = assign(job, [proc("p1"), proc("p2")])
    assert counts(result) == {"p1": 2, "p2": 2}


# --- standbys ----------------------------------------------------------------------------------

def test_standbys_are_distinct_never_beside_the_active_and_spread() -> None:
    job = tasks(9)
    result = assign(job, [proc("p1"), proc("p2"), proc("p3")],
                    AssignmentConfig(num_standbys=2))
    active, standby = roles(result, "active"), roles(result, "standby")
    for t in job:
        holders = [p for p, names in standby.items() if t.name in names]
        assert len(holders) == 2
        assert result.owners()[t.name] not in holders
    assert sorted(len(s) for s in standby.values()) == [6, 6, 6]
    assert sorted(len(a) for a in active.values()) == [3, 3, 3]


def test_standbys_are_sticky_and_capped_by_the_processor_count() -> None:
    before = [proc("p1", ["t00"], ["t01"]), proc("p2", ["t01"], ["t00"])]
    result = assign(tasks(2), before, AssignmentConfig(num_standbys=3))
    assert roles(result, "standby") == {"p1": ("t01",), "p2": ("t00",)}


def test_stateless_tasks_get_no_standby() -> None:
    job = tasks(2, prefix="s", stateful=False)
    result = assign(job, [proc("p1"), proc("p2")], AssignmentConfig(num_standbys=1))
    assert all(p.standby == () for p in result.processors)


def test_a_moved_task_keeps_its_old_owner_as_standby() -> None:
    before = [proc("p1", ["t00", "t01"], ["t02"]), proc("p2", ["t02"], ["t00"]),
              proc("p3", lags={"t01": 0})]
    result = assign(tasks(3), before, AssignmentConfig(num_standbys=1))
    assert result.owners()["t01"] == "p3"
    assert "t01" in roles(result, "standby")["p1"]


# --- input checks and edge cases ---------------------------------------------------------------

def test_no_processors_means_an_empty_assignment() -> None:
    assert assign(tasks(3), []) == Assignment((), follow_up=False)


def test_a_task_active_on_two_processors_is_refused() -> None:
    with pytest.raises(AssignmentError, match="'t00' is active on both 'p1' and 'p2'"):
        assign(tasks(1), [proc("p1", ["t00"]), proc("p2", ["t00"])])


@pytest.mark.parametrize("bad", [{"max_warmups": 0}, {"balance_factor": 0},
                                 {"acceptable_lag": -1}, {"num_standbys": True}])
def test_config_values_are_checked(bad: dict[str, int]) -> None:
    with pytest.raises(AssignmentError, match=next(iter(bad))):
        AssignmentConfig(**bad)


def test_duplicates_and_bad_capacity_are_refused() -> None:
    with pytest.raises(AssignmentError, match="duplicate task"):
        assign([TaskInfo("a"), TaskInfo("a")], [proc("p1")])
    with pytest.raises(AssignmentError, match="duplicate processor id"):
        assign(tasks(1), [proc("p1"), proc("p1")])
    with pytest.raises(AssignmentError, match="capacity"):
        proc("p1", capacity=0)


def test_roles_of_tasks_no_longer_in_the_job_are_dropped() -> None:
    result = assign(tasks(1), [proc("p1", ["t00", "gone"], ["old"], ["x"], {"gone": 0})])
    assert roles(result, "active") == {"p1": ("t00",)}
    assert roles(result, "standby") == {"p1": ()}


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


# --- the scenario document and `baton assign` ------------------------------------------------

SCENARIO = {
    "tasks": [{"name": "a"}, {"name": "b", "stateful": True}, {"name": "c", "stateful": False},
              {"name": "d"}],
    "processors": [
        {"id": "p1", "capacity": 1, "active": ["a", "b", "c", "d"], "standby": [], "lags": {}},
        {"id": "p2", "active": [], "standby": ["a"], "lags": {"a": 10, "b": 5000}},
    ],
    "config": {"acceptable_lag": 1000, "max_warmups": 2, "num_standbys": 1},
}


def write(tmp_path: Path, data: object, name: str = "scenario.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_parse_scenario_applies_defaults() -> None:
    scenario = parse_scenario({"tasks": [{"name": "a"}], "processors": [{"id": "p1"}]})
    assert scenario == Scenario((TaskInfo("a"),), (ProcessorSnapshot("p1"),), AssignmentConfig())


def test_format_scenario_round_trips() -> None:
    scenario = parse_scenario(SCENARIO)
    assert parse_scenario(json.loads(json.dumps(format_scenario(scenario)))) == scenario
    assert scenario_from_json(json.dumps(SCENARIO)) == scenario


def test_cli_json_prints_the_pinned_document(tmp_path: Path) -> None:
    out = CliRunner().invoke(assign_command, ["--scenario", str(write(tmp_path, SCENARIO)),
                                              "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {
        "processors": [
            {"id": "p1", "active": ["b", "d"], "warmup": [], "standby": ["a"]},
            {"id": "p2", "active": ["a", "c"], "warmup": [], "standby": ["b", "d"]},
        ],
        "follow_up": False,
    }
    scenario = parse_scenario(SCENARIO)
    assert json.loads(out.output) == format_assignment(
        assign(scenario.tasks, scenario.processors, scenario.config))


def test_cli_human_output_has_a_table_and_the_moves(tmp_path: Path) -> None:
    data = {"tasks": [{"name": "x"}, {"name": "y"}],
            "processors": [{"id": "p1", "active": ["x", "y"]}, {"id": "p2"}]}
    out = CliRunner().invoke(assign_command, ["--scenario", str(write(tmp_path, data))])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert any(line.split()[:3] == ["p1", "1", "2"] for line in lines)
    assert "warmup  x  on p2, active stays on p1  (lag unknown)" in out.output
    assert "moves: 0 active now, 0 new or orphaned placed, 1 warming up" in out.output
    assert "follow-up: yes" in out.output


def test_cli_reads_standard_input() -> None:
    out = CliRunner().invoke(assign_command, ["--scenario", "-", "--json"],
                             input=json.dumps(SCENARIO))
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["follow_up"] is False


def broken(**change: object) -> dict[str, object]:
    """SCENARIO with ``a__0__b=value`` set (``KeyError``: deleted)."""
    data: dict[str, object] = json.loads(json.dumps(SCENARIO))
    for path, value in change.items():
        *parents, last = path.split("__")
        node: Any = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is KeyError:
            del node[int(last) if isinstance(node, list) else last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return data


@pytest.mark.parametrize(("data", "field"), [
    (broken(tasks__0__name=KeyError), "tasks[0].name"),
    (broken(processors__1__id=KeyError), "processors[1].id"),
    (broken(tasks=KeyError), "tasks: missing required key"),
    (broken(processors__0__capacity="2"), "processors[0].capacity"),
    (broken(processors__0__capacity=0), "processors[0].capacity"),
    (broken(tasks__2__stateful="no"), "tasks[2].stateful"),
    (broken(processors__1__lags={"a": -1}), "processors[1].lags.a"),
    (broken(processors__1__lags={"zz": 1}), "processors[1].lags: unknown task 'zz'"),
    (broken(processors__0__active=["a", "nope"]), "processors[0].active[1]: unknown task"),
    (broken(processors__1__standby=["ghost"]), "processors[1].standby[0]: unknown task"),
    (broken(processors__1__active=["b"]),
     "processors[1].active: task 'b' is already active on 'p1'"),
    (broken(processors__1__active=["a"]), "processors[1].standby[0]: task 'a' is also active"),
    (broken(processors__1__id="p1"), "processors[1].id: duplicate processor id"),
    (broken(tasks__3__name="a"), "tasks[3].name: duplicate task"),
    (broken(processors__1__standby=["b", "b"]), "processors[1].standby[1]"),
    (broken(config__max_warmups=0), "config.max_warmups"),
    (broken(config__max_warmup=3), "config.max_warmup: unknown key"),
    (broken(config=[]), "config: expected a JSON object"),
    ([], "scenario: expected a JSON object"),
    ("{\"tasks\": [", "line 1 column 12: invalid JSON"),
])
def test_cli_errors_exit_2_naming_the_file_and_the_field(tmp_path: Path, data: object,
                                                        field: str) -> None:
    path = write(tmp_path, data)
    out = CliRunner().invoke(assign_command, ["--scenario", str(path)])
    assert out.exit_code == 2, out.output
    assert str(path) in out.output and field in out.output


def test_cli_missing_file_exits_2_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "missing.json"
    out = CliRunner().invoke(assign_command, ["--scenario", str(path)])
    assert out.exit_code == 2
    assert str(path) in out.output and "No such file" in out.output


def test_scenario_error_has_the_path() -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"tasks": [], "processors": [{"id": 3}]})
    assert info.value.path == "processors[0].id"


def test_assign_is_a_baton_command(tmp_path: Path) -> None:
    from orchestrator.cli import main

    out = CliRunner().invoke(main, ["assign", "--scenario", str(write(tmp_path, SCENARIO)),
                                    "--json"])
    assert out.exit_code == 0, out.output


def test_all_combinations_of_small_clusters_are_deterministic() -> None:
    """Every owner layout of 4 tasks on 3 processors: the result ignores input order."""
    job = tasks(4)
    for layout in itertools.product(["p0", "p1", "p2", None], repeat=4):
        procs = [proc(pid, [t.name for t, o in zip(job, layout, strict=True) if o == pid])
                 for pid in ("p0", "p1", "p2")]
        assert assign(job, procs) == assign(job[::-1], procs[::-1])


# --- exclusions (a processor failed a task) ---------------------------------------------------

def excluded(p: ProcessorSnapshot, names: Sequence[str]) -> ProcessorSnapshot:
    return ProcessorSnapshot(p.id, p.capacity, p.active, p.standby, p.warmup, p.lags,
                             frozenset(names))


def test_a_newcomer_that_failed_a_task_warms_up_another_one() -> None:
    """p3 failed t00's warmup: the scale-out still completes, with another task."""
    before = [proc("p1", ["t00", "t01"]), proc("p2", ["t02", "t03"]), proc("p3")]
    plain = assign(tasks(4), before, AssignmentConfig(max_warmups=1))
    first = roles(plain, "warmup")["p3"]
    again = assign(tasks(4), [*before[:2], excluded(before[2], first)],
                   AssignmentConfig(max_warmups=1))
    assert roles(again, "warmup")["p3"] and roles(again, "warmup")["p3"] != first


def test_a_processor_excluded_from_every_task_gets_nothing_and_nothing_breaks() -> None:
    before = [proc("p1", ["t00", "t01"]), proc("p2", ["t02", "t03"]),
              excluded(proc("p3"), ["t00", "t01", "t02", "t03"])]
    result = assign(tasks(4), before, AssignmentConfig(max_warmups=4, num_standbys=1))
    assert roles(result, "warmup")["p3"] == () and roles(result, "standby")["p3"] == ()
    assert roles(result, "active")["p3"] == ()


def test_an_orphan_avoids_the_processor_that_failed_it_even_when_caught_up() -> None:
    before = [excluded(proc("p1", lags={"t00": 0}), ["t00"]), proc("p2", ["t01"]),
              proc("p3", ["t02"])]
    result = assign(tasks(3), before)
    assert result.owners()["t00"] != "p1"


def test_an_orphan_excluded_everywhere_still_gets_a_home() -> None:
    """The assignor places it; the coordinator's failure bookkeeping decides to hold it."""
    before = [excluded(proc("p1"), ["t00"]), excluded(proc("p2"), ["t00"])]
    assert "t00" in assign(tasks(1), before).owners()


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_exclusions_are_respected_for_warmups_and_standbys(data: st.DataObject) -> None:
    n_tasks = data.draw(st.integers(1, 12))
    names = [t.name for t in tasks(n_tasks)]
    n_procs = data.draw(st.integers(1, 5))
    owners = data.draw(st.lists(st.integers(0, n_procs - 1), min_size=n_tasks,
                                max_size=n_tasks))
    procs = []
    for k in range(n_procs):
        held = [t for t, o in zip(names, owners, strict=True) if o == k]
        banned = data.draw(st.lists(st.sampled_from(names), max_size=n_tasks))
        banned = [t for t in banned if t not in held]
        lags = data.draw(st.dictionaries(st.sampled_from(names), st.integers(0, 3000)))
        procs.append(excluded(proc(f"p{k}", held, lags=lags), banned))
    config = AssignmentConfig(max_warmups=data.draw(st.integers(1, 4)),
                              num_standbys=data.draw(st.integers(0, 2)))
    result = assign(tasks(n_tasks), procs, config)
    bans = {p.id: p.excluded for p in procs}
    for p in result.processors:
        assert not set(p.warmup) & bans[p.id], (p, bans[p.id])
        assert not set(p.standby) & bans[p.id], (p, bans[p.id])
    before = {t: p.id for p in procs for t in p.active}
    for task, pid in result.owners().items():
        assert task not in bans[pid] or before.get(task) == pid or all(
            task in b for b in bans.values()), (task, pid)


def test_a_caught_up_standby_beats_a_restoring_owner() -> None:
    """KIP-441: the owner reports lag 500 on its own task, p2 holds a standby at lag 0,
    acceptable_lag is 100: the task moves to p2 now; p1 warms a task up to rebalance."""
    before = [proc("p1", ["t00"], lags={"t00": 500}), proc("p2", ["t01"], standby=["t00"],
                                                          lags={"t00": 0})]
    result = assign(tasks(2), before, AssignmentConfig(acceptable_lag=100, num_standbys=1))
    assert result.owners()["t00"] == "p2"
    assert len(roles(result, "warmup")["p1"]) == 1 and result.follow_up


def test_a_restoring_owner_keeps_its_task_when_nobody_is_caught_up() -> None:
    before = [proc("p1", ["t00"], lags={"t00": 500}), proc("p2", lags={"t00": 300})]
    result = assign(tasks(1), before, AssignmentConfig(acceptable_lag=100))
    assert result.owners() == {"t00": "p1"}


def test_assign_cli_moves_a_task_off_a_restoring_owner(tmp_path: Path) -> None:
    data = {"tasks": [{"name": "t0"}, {"name": "t1"}],
            "processors": [{"id": "p1", "active": ["t0"], "lags": {"t0": 500}},
                           {"id": "p2", "active": ["t1"], "lags": {"t0": 0}}],
            "config": {"acceptable_lag": 100}}
    run = CliRunner().invoke(assign_command, ["--scenario", str(write(tmp_path, data)),
                                              "--json"])
    assert run.exit_code == 0, run.output
    owners = {p["id"]: p["active"] for p in json.loads(run.output)["processors"]}
    assert "t0" in owners["p2"], owners
