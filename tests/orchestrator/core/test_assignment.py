"""The lag-aware assignor (orchestrator/core/assignment/, after KIP-441): a table test
of each rule: catching up, orphans, balance and stickiness, standbys, input checks,
exclusions."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.assignment import (
    Assignment,
    AssignmentConfig,
    AssignmentError,
    ProcessorSnapshot,
    TaskInfo,
    assign,
    owner_changes,
)
from tests.orchestrator.core.assignment_support import (
    EVEN,
    ODD,
    TWO_TO_THREE,
    converge,
    counts,
    proc,
    roles,
    tasks,
)

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
    assert owner_changes(before, result) == ()
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
    assert {m.task for m in owner_changes(before, result)} == {"t00", "t01", "t02"}


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
