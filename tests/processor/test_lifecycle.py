"""The task lifecycle table (processor/lifecycle.py), walked: every (stage, event) pair
decided, the rows that matter one by one, and the properties the runtime relies on."""

from __future__ import annotations

from collections import deque

import pytest

from processor.lifecycle import (
    FAILURES,
    LISTINGS,
    RECONCILE_ORDER,
    TABLE,
    Command,
    Event,
    Stage,
    Transition,
    listing_events,
    plan,
    reply_plan,
    step,
)

S, E, C = Stage, Event, Command
HELD = (S.WARMUP, S.STANDBY, S.FENCING, S.REPLAYING, S.ACTIVE)


def test_every_state_meets_every_event() -> None:
    assert set(TABLE) == {(s, e) for s in Stage for e in Event}


# ---- rows ----------------------------------------------------------------------------

ROWS = [
    # a reply starts, switches, drops, releases
    (S.IDLE, E.LISTED_WARMUP, S.WARMUP, [C.START_REPLICA]),
    (S.IDLE, E.LISTED_STANDBY, S.STANDBY, [C.START_REPLICA]),
    (S.IDLE, E.LISTED_ACTIVE, S.FENCING, [C.ACTIVATE]),
    (S.IDLE, E.LISTED_UNKNOWN, S.IDLE, []),
    (S.RELEASED, E.LISTED_ACTIVE, S.FENCING, [C.ACTIVATE]),
    (S.RELEASED, E.LISTED_STANDBY, S.STANDBY, [C.START_REPLICA]),
    (S.WARMUP, E.LISTED_ACTIVE, S.FENCING, [C.ACTIVATE]),
    (S.WARMUP, E.LISTED_STANDBY, S.STANDBY, [C.SWITCH_ROLE]),
    (S.STANDBY, E.LISTED_WARMUP, S.WARMUP, [C.SWITCH_ROLE]),
    (S.WARMUP, E.LISTED_WARMUP, S.WARMUP, []),
    (S.WARMUP, E.UNLISTED, S.IDLE, [C.DROP]),
    (S.STANDBY, E.REPARTITIONED, S.IDLE, [C.DROP]),
    (S.ACTIVE, E.LISTED_ACTIVE, S.ACTIVE, [C.GROW]),
    (S.ACTIVE, E.UNLISTED, S.RELEASED, [C.RELEASE]),
    (S.ACTIVE, E.LISTED_STANDBY, S.STANDBY, [C.RELEASE, C.START_REPLICA]),
    (S.FENCING, E.UNLISTED, S.FENCING, []),
    (S.REPLAYING, E.REPARTITIONED, S.REPLAYING, []),
    (S.FAILED, E.LISTED_WARMUP, S.FAILED, []),
    (S.FAILED, E.UNLISTED, S.FAILED, []),
    (S.FAILED, E.FAILURE_SEEN, S.IDLE, [C.FORGET_FAILURE]),
    # the activation
    (S.FENCING, E.FENCE_DONE, S.REPLAYING, [C.REPLAY_FIRST]),
    (S.REPLAYING, E.REPLAY_DONE, S.REPLAYING, [C.REPLAY_NEXT]),
    (S.REPLAYING, E.ALL_REPLAYED, S.ACTIVE, [C.GO_ACTIVE]),
    (S.FENCING, E.FENCE_REFUSED, S.FAILED, [C.FREE, C.MARK_FAILED]),
    (S.FENCING, E.FENCED, S.FAILED, [C.FREE, C.MARK_FAILED]),
    (S.REPLAYING, E.SOURCE_GONE, S.FAILED, [C.FREE, C.MARK_FAILED]),
    # an active task's transactions
    (S.ACTIVE, E.COMMITTED, S.ACTIVE, []),
    (S.ACTIVE, E.ABORTED, S.ACTIVE, [C.COUNT_ABORTED, C.REWIND]),
    (S.ACTIVE, E.PRODUCER_LOST, S.FENCING, [C.STOP_ACTIVE, C.ACTIVATE]),
    (S.ACTIVE, E.HISTORY_MISSING, S.FENCING, [C.STOP_ACTIVE, C.ACTIVATE]),
    (S.ACTIVE, E.FENCED, S.FAILED, [C.COUNT_FENCED, C.STOP_ACTIVE, C.MARK_FAILED]),
    (S.ACTIVE, E.JOB_FAILED, S.FAILED, [C.STOP_ACTIVE, C.MARK_FAILED]),
    (S.ACTIVE, E.STORE_FAILED, S.FAILED, [C.STOP_ACTIVE, C.MARK_FAILED]),
    (S.ACTIVE, E.BROKER_ERROR, S.FAILED, [C.FREE, C.MARK_FAILED]),
    # a replica's reads
    (S.WARMUP, E.INPUT_TRIMMED, S.FAILED, [C.COUNT_TRIMMED, C.FREE, C.MARK_FAILED]),
    (S.STANDBY, E.STORE_FAILED, S.FAILED, [C.FREE, C.MARK_FAILED]),
    (S.IDLE, E.BROKER_ERROR, S.FAILED, [C.FREE, C.MARK_FAILED]),     # a start failed
    (S.RELEASED, E.STORE_FAILED, S.FAILED, [C.FREE, C.MARK_FAILED]),
    (S.FAILED, E.FENCED, S.FAILED, []),
]


@pytest.mark.parametrize(("stage", "event", "then", "commands"), ROWS,
                         ids=[f"{s.value}-{e.value}" for s, e, _, _ in ROWS])
def test_row(stage: Stage, event: Event, then: Stage, commands: list[Command]) -> None:
    assert step(stage, event) == Transition(then, tuple(commands))


# ---- properties ----------------------------------------------------------------------

def test_every_state_is_reached_from_idle() -> None:
    seen, todo = {S.IDLE}, deque([S.IDLE])
    while todo:
        stage = todo.popleft()
        for event in Event:
            nxt = step(stage, event).stage
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(Stage)


def test_a_failed_task_waits_for_the_coordinator() -> None:
    """Only the coordinator's having seen the failure (and listing the task nowhere)
    lets a failed task be started again; no failure nor reply does before."""
    for event in Event:
        then = step(S.FAILED, event)
        if event is E.FAILURE_SEEN:
            assert then == Transition(S.IDLE, (C.FORGET_FAILURE,))
        else:
            assert then == Transition(S.FAILED), event


def test_failed_is_entered_only_by_marking_it_and_marking_leads_there() -> None:
    for (stage, event), rule in TABLE.items():
        if stage is S.FAILED:
            continue
        assert (rule.stage is S.FAILED) == (C.MARK_FAILED in rule.commands), (stage, event)


def test_another_owner_fencing_a_held_task_always_fails_it() -> None:
    """A fenced producer means another processor owns the task now: it is never
    retried here (the coordinator decides where it goes)."""
    for stage in Stage:
        if stage is not S.FAILED:
            assert step(stage, E.FENCED).stage is S.FAILED, stage


def test_whatever_leaves_active_stops_its_task() -> None:
    """An active task leaves only by a release (final commit), a stop without
    committing, or being freed after a failed change: never with its producer open."""
    for event in Event:
        rule = step(S.ACTIVE, event)
        if rule.stage is not S.ACTIVE:
            assert {C.RELEASE, C.STOP_ACTIVE, C.FREE} & set(rule.commands), event


def test_active_is_entered_only_by_going_active_after_the_replays() -> None:
    for (stage, event), rule in TABLE.items():
        if rule.stage is S.ACTIVE and stage is not S.ACTIVE:
            assert (stage, event, rule.commands) == (S.REPLAYING, E.ALL_REPLAYED,
                                                     (C.GO_ACTIVE,))


def test_fencing_is_entered_only_by_an_activation() -> None:
    for (stage, event), rule in TABLE.items():
        if rule.stage is S.FENCING and stage is not S.FENCING:
            assert rule.commands[-1] is C.ACTIVATE, (stage, event)


def test_an_activation_runs_to_its_end_whatever_the_reply() -> None:
    for stage in (S.FENCING, S.REPLAYING):
        for event in LISTINGS:
            assert step(stage, event) == Transition(stage), (stage, event)


def test_no_failure_is_ignored_by_a_held_task() -> None:
    """Every failure of a task this processor holds changes something: a rewind, a
    restart, or a failure reported to the coordinator."""
    for stage in HELD:
        for event in FAILURES:
            assert step(stage, event).commands, (stage, event)


def test_a_reply_commands_only_what_reconciliation_carries_out_and_in_its_order() -> None:
    for (stage, event), rule in TABLE.items():
        if event in LISTINGS:
            order = [RECONCILE_ORDER.index(c) for c in rule.commands]
            assert order == sorted(order), (stage, event)


# ---- a reply's plan ------------------------------------------------------------------

def test_a_reply_frees_before_it_starts_across_tasks() -> None:
    commands = plan(
        {"t0": S.ACTIVE, "t1": S.WARMUP, "t2": S.IDLE, "t3": S.FAILED, "t4": S.ACTIVE},
        {"t2": [E.LISTED_ACTIVE], "t0": [E.LISTED_STANDBY], "t1": [E.UNLISTED],
         "t3": [E.FAILURE_SEEN], "t4": [E.LISTED_ACTIVE]})
    assert commands == [("t3", C.FORGET_FAILURE), ("t0", C.RELEASE), ("t1", C.DROP),
                        ("t0", C.START_REPLICA), ("t2", C.ACTIVATE), ("t4", C.GROW)]


def test_a_split_child_is_released_before_its_parent_grows_into_its_partitions() -> None:
    commands = plan({"parent": S.ACTIVE, "child": S.ACTIVE},
                    {"parent": [E.LISTED_ACTIVE], "child": [E.UNLISTED]})
    assert commands == [("child", C.RELEASE), ("parent", C.GROW)]


def test_a_replica_whose_partitions_changed_is_dropped_then_started_again() -> None:
    events = listing_events(S.WARMUP, S.WARMUP, stale=True, failure_seen=False)
    assert events == (E.REPARTITIONED, E.LISTED_WARMUP)
    assert plan({"t0": S.WARMUP}, {"t0": events}) == [("t0", C.DROP),
                                                      ("t0", C.START_REPLICA)]


def test_listing_events() -> None:
    assert listing_events(S.ACTIVE, None, False, False) == (E.UNLISTED,)
    assert listing_events(S.FAILED, None, False, True) == (E.FAILURE_SEEN,)
    assert listing_events(S.IDLE, S.ACTIVE, False, False) == (E.LISTED_ACTIVE,)
    assert listing_events(S.IDLE, S.STANDBY, False, False) == (E.LISTED_STANDBY,)


# ---- a heartbeat reply, from what is held and what is listed --------------------------

MODEL = {"t0": ["in:0"], "t1": ["in:1"], "t2": ["in:2"]}


def test_a_reply_releases_before_it_drops_before_it_starts_before_it_activates() -> None:
    commands = reply_plan({"t0": S.ACTIVE, "t1": S.WARMUP, "t2": S.IDLE},
                          {"t2": S.ACTIVE, "t0": S.STANDBY}, set(), None, MODEL)
    assert commands == [("t0", C.RELEASE), ("t1", C.DROP), ("t0", C.START_REPLICA),
                        ("t2", C.ACTIVATE)]


def test_a_reply_restarts_a_stale_replica_and_switches_the_role_of_another() -> None:
    commands = reply_plan({"t0": S.WARMUP, "t1": S.WARMUP},
                          {"t0": S.WARMUP, "t1": S.STANDBY}, {"t0"}, None, MODEL)
    assert commands == [("t0", C.DROP), ("t1", C.SWITCH_ROLE), ("t0", C.START_REPLICA)]


def test_a_reply_leaves_an_activation_alone() -> None:
    for stage in (S.FENCING, S.REPLAYING):
        assert reply_plan({"t0": stage}, {"t0": S.ACTIVE}, set(), None, MODEL) == []
        assert reply_plan({"t0": stage}, {}, set(), None, MODEL) == []


def test_a_failed_task_waits_until_the_coordinator_stops_listing_it() -> None:
    assert reply_plan({"t0": S.FAILED}, {"t0": S.WARMUP}, set(), None, MODEL) == []
    assert reply_plan({"t0": S.FAILED}, {}, set(), None, MODEL) == [
        ("t0", C.FORGET_FAILURE)]
    assert reply_plan({"t0": S.IDLE}, {"t0": S.WARMUP}, set(), None, MODEL) == [
        ("t0", C.START_REPLICA)]


def test_a_failure_is_forgotten_only_once_the_coordinator_has_seen_it() -> None:
    """A task fenced while its release was on its way is listed by neither the reply
    nor, yet, the heartbeat that reply answers: forgotten then, its failure would never
    be reported, and the coordinator would wait for a release that cannot come."""
    assert reply_plan({"t0": S.FAILED}, {}, set(), frozenset(), MODEL) == []
    assert reply_plan({"t0": S.FAILED}, {}, set(), frozenset({"t0"}), MODEL) == [
        ("t0", C.FORGET_FAILURE)]


def test_tasks_outside_the_model_are_not_started_and_active_ones_grow() -> None:
    commands = reply_plan({"t1": S.ACTIVE, "t9": S.IDLE, "t8": S.IDLE},
                          {"t1": S.ACTIVE, "t9": S.ACTIVE, "t8": S.WARMUP},
                          set(), None, MODEL)
    assert commands == [("t1", C.GROW)]


def test_a_released_task_is_started_again_like_an_idle_one() -> None:
    assert reply_plan({"t0": S.RELEASED}, {"t0": S.ACTIVE}, set(), None, MODEL) == [
        ("t0", C.ACTIVATE)]
    assert reply_plan({"t0": S.RELEASED}, {}, set(), None, MODEL) == []
