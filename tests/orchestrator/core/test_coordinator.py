"""The coordinator core (orchestrator/core/coordinator.py) on a fake clock, with fake
processors speaking the wire protocol (tests/orchestrator/core/coordinator_harness.py):
registration and liveness, handoffs, drains, restarts, expansion. Interleavings are
explicit calls, never sleeps.
"""

from __future__ import annotations

import pytest

from orchestrator.core.coordinator import DrainError, UnknownProcessor
from orchestrator.core.views import pending, status
from tests.orchestrator.core.coordinator_harness import (
    ALL,
    TOPIC,
    FakeProcessor,
    Harness,
    at,
    catch_up_and_release,
    owners,
    partitions,
    start_two,
)

# ---- registration and liveness ----------------------------------------------------------


def test_register_then_heartbeat_is_alive() -> None:
    h = Harness()
    p1 = FakeProcessor(h, "p1")
    assert p1.register().alive
    assert h.core.picture.alive("p1-exec-1")
    assert p1.beat().alive
    assert p1.listed() == set(ALL)  # the only processor: everything, directly active
    assert p1.reply is not None and p1.reply.tasks["Partition 0"] == ["in:0"]
    assert h.stream["processor/p1"]["execution_id"] == "p1-exec-1"


def test_new_execution_invalidates_the_previous_one() -> None:
    h = Harness()
    old = FakeProcessor(h, "p1")
    old.register()
    old.beat()
    new = FakeProcessor(h, "p1", execution="p1-exec-2")
    new.register()
    assert not h.core.picture.alive("p1-exec-1") and h.core.picture.alive("p1-exec-2")
    assert not old.beat().alive
    assert h.metric("baton_invalid_heartbeats_total") == 1
    # the same id comes back: its tasks stay with it (its activation fences the old one)
    assert new.beat().alive and new.listed() == set(ALL)


def test_unknown_execution_is_not_alive() -> None:
    h = Harness()
    assert not h.core.picture.alive("nobody")
    stranger = FakeProcessor(h, "p9")
    reply = stranger.beat()
    assert not reply.alive
    assert reply.unknown        # no record of p9 at all: it registers again
    assert h.metric("baton_invalid_heartbeats_total") == 1
    stranger.register()
    FakeProcessor(h, "p9", "p9-exec-2").register()
    replaced = stranger.beat()
    assert not replaced.alive and not replaced.unknown    # a newer execution: stop


def test_silent_processor_is_lost_and_its_tasks_move() -> None:
    h = Harness()
    p1, p2 = FakeProcessor(h, "p1"), FakeProcessor(h, "p2")
    p1.positions = at(0, *ALL)
    p1.register()
    p2.register()
    for _ in range(4):
        p1.beat()
        p2.beat()
    assert set(owners(h).values()) == {"p1", "p2"}
    for _ in range(6):  # p2 keeps beating, p1 is silent past the 5 s timeout
        h.clock.advance(1.0)
        p2.beat()
    assert not h.core.picture.alive("p1-exec-1")
    assert set(owners(h).values()) == {"p2"}
    assert not p1.beat().alive
    assert status(h.core.picture)["processors"][0] == {**status(h.core.picture)["processors"][0],
                                               "id": "p1", "alive": False}


# ---- handoffs -------------------------------------------------------------------------


def test_full_handoff_through_the_protocol() -> None:
    h = Harness()
    p1, p2 = start_two(h)
    moving = sorted(h.core.picture.handoffs)
    assert len(moving) == 2  # max_warmups
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"planned"}
    p2.beat()  # reply lists the warmups
    assert p2.reply is not None and sorted(p2.reply.assignment.warmup) == moving
    p2.positions = at(10, *moving)
    p2.beat()  # reports warmup, lag 990 > 100
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"catching_up"}
    assert {x["lag"] for x in status(h.core.picture)["handoffs"]} == {990}
    h.clock.advance(2.0)
    p2.positions = at(950, *moving)
    p2.beat()  # lag 50: release starts, the task leaves p1's listing
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"releasing"}
    assert all(owners(h)[t] is None for t in moving)
    assert not p2.listed() & set(moving)  # never active on the target before the release
    p1.positions.update(at(1010, *moving))
    p1.beat()  # p1 releases (reports "released" with final T1 next time)
    p1.beat()
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"activating"}
    assert h.core.picture.handoffs[moving[0]].final_offsets == {partitions(moving[0])[0]: 1010}
    p2.beat()  # listed active now
    assert p2.listed() >= set(moving)
    p2.beat()  # reports active
    assert not h.core.picture.handoffs
    assert {owners(h)[t] for t in moving} == {"p2"}
    assert h.metric("baton_handoffs_total", outcome="done") == 2
    assert h.metric("baton_handoff_pause_seconds_count") == 2
    assert h.metric("baton_handoff_phase_seconds_count", phase="catching_up") == 2
    assert all(f"handoff/{t}" not in h.stream for t in moving)
    assert sorted(h.stream["assignment"]["p2"]["active"]) == moving
    p1.beat()
    p2.beat()
    assert status(h.core.picture)["balanced"], pending(h.core.picture)


def test_the_source_is_told_which_of_its_tasks_move_until_their_release() -> None:
    """So it long-polls for the release instead of waiting for its next heartbeat."""
    h = Harness()
    p1, p2 = start_two(h)
    moving = sorted(h.core.picture.handoffs)
    p1.beat()
    assert p1.reply is not None and p1.reply.moving == moving
    p2.beat()
    assert p2.reply is not None and p2.reply.moving == []
    p2.positions = at(1000, *moving)
    p2.beat()       # caught up: releasing, the tasks leave p1's listing
    p1.beat()
    assert p1.reply.moving == []


def test_a_release_waits_its_whole_timeout_after_the_coordinator_could_hear_again() -> None:
    """The coordinator's own silence (its lease lapsed: it answered 503) is excused, as
    for a processor's heartbeats: the release timeout counts from when it could hear."""
    h = Harness()
    p1, p2 = start_two(h)
    catch_up_and_release(h, p1, p2)
    p1.ignore_release = True
    p1.beat()
    h.clock.advance(2.5)                        # a lapse of 2.5 s of the 3 s timeout
    h.core.picture.handoff_book.excuse(h.clock.monotonic())
    h.core.picture.processors.excuse(h.clock.monotonic())
    h.clock.advance(1.0)                        # 3.5 s since the release: still waiting
    p2.beat()
    assert h.core.picture.alive("p1-exec-1")
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"releasing"}
    h.clock.advance(2.5)                        # 3.5 s since the coordinator heard again
    p2.beat()
    assert not h.core.picture.alive("p1-exec-1")
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"activating"}


def test_release_timeout_declares_the_source_dead() -> None:
    h = Harness()
    p1, p2 = start_two(h)
    catch_up_and_release(h, p1, p2)
    p1.ignore_release = True
    p1.beat()
    h.clock.advance(3.5)  # past release_timeout_s = 3
    p2.beat()
    assert not h.core.picture.alive("p1-exec-1")
    assert not p1.beat().alive
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"activating"}
    assert all(x.final_offsets is None for x in h.core.picture.handoffs.values())
    p2.beat()
    p2.beat()
    assert set(owners(h).values()) == {"p2"}  # p1's other tasks were placed again
    assert h.metric("baton_handoffs_total", outcome="fenced") == 2


def test_activation_timeout_declares_the_target_dead_and_resumes_the_source(
        caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    p1, p2 = start_two(h)
    moving = catch_up_and_release(h, p1, p2)
    p1.beat()
    p1.beat()  # released and acknowledged
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"activating"}
    p2.activate_as = "activating"  # listed active, it never gets there (stuck replaying)
    for _ in range(7):  # activate_timeout_s = 6; p1 keeps beating
        h.clock.advance(1.0)
        p1.beat()
        p2.beat()
    assert not h.core.picture.alive("p2-exec-1")
    assert {owners(h)[t] for t in moving} == {"p1"}
    assert p1.active() == set(ALL)
    assert "still listed active" not in caplog.text
    assert h.metric("baton_handoffs_total", outcome="cancelled") == 2


def test_target_lost_while_catching_up_cancels() -> None:
    h = Harness()
    p1, p2 = start_two(h)
    moving = sorted(h.core.picture.handoffs)
    p2.beat()
    p2.positions = at(0, *moving)
    p2.beat()
    for _ in range(6):
        h.clock.advance(1.0)
        p1.beat()
    assert not h.core.picture.handoffs
    assert set(owners(h).values()) == {"p1"}
    assert h.metric("baton_handoffs_total", outcome="cancelled") == 2
    assert p1.listed() == set(ALL)


def test_target_lost_while_releasing_resumes_the_source() -> None:
    h = Harness()
    p1, p2 = start_two(h)
    moving = catch_up_and_release(h, p1, p2)
    p1.beat()  # released
    assert all(p1.roles[t] == "released" for t in moving)
    # before p1's next beat acknowledges it, the target's execution is replaced
    FakeProcessor(h, "p2", execution="p2-exec-2").register()
    assert {owners(h)[t] for t in moving} == {"p1"}
    # the new execution is a fresh target: the moves start over from planned
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"planned"}
    p1.beat()
    assert p1.active() == set(ALL)  # resumed
    assert h.metric("baton_handoffs_total", outcome="cancelled") == 2


def test_caught_up_standby_moves_without_warmup() -> None:
    h = Harness()
    p1 = FakeProcessor(h, "p1")
    p1.register()
    p1.positions = at(500, *ALL)
    p1.beat()
    p2 = FakeProcessor(h, "p2")
    p2.roles = {t: "standby" for t in ALL}  # a store on disk, caught up
    p2.positions = at(480, *ALL)
    p2.register()
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"releasing"}
    assert len(h.core.picture.handoffs) == 2


# ---- drain -------------------------------------------------------------------------------


def test_drain_moves_everything_then_stops() -> None:
    h = Harness()
    p1, p2 = start_two(h)
    for _ in range(2):
        p2.positions = at(1000, *ALL)
        p2.beat()
        p1.beat()
        p1.beat()
        p2.beat()
        p2.beat()
    assert set(owners(h).values()) == {"p1", "p2"}
    with pytest.raises(UnknownProcessor):
        h.core.drain("p7")
    h.core.drain("p1")
    h.sync()
    assert h.stream["drain"] == {"processors": ["p1"]}
    assert h.metric("baton_processors", state="draining") == 1
    assert h.metric("baton_processors", state="alive") == 1
    for _ in range(6):
        p2.positions = at(1000, *ALL)
        p2.beat()
        p1.beat()
    assert set(owners(h).values()) == {"p2"}
    assert p1.reply is not None and p1.reply.stop
    p1.leave()
    assert "processor/p1" not in h.stream and "drain" not in h.stream
    assert status(h.core.picture)["balanced"], pending(h.core.picture)


def test_two_drains_in_a_row_move_everything_to_the_one_left() -> None:
    """The first drain's handoffs may be planned to the second processor drained: they
    are cancelled and planned again to the one left (else they waited for ever: a
    draining processor is given no warmup)."""
    h = Harness()
    p1, p2 = start_two(h)
    p3 = FakeProcessor(h, "p3")
    p3.register()
    procs = (p1, p2, p3)
    for _ in range(4):
        for p in procs:
            p.positions = at(1000, *ALL)
            p.beat()
    assert set(owners(h).values()) == {"p1", "p2", "p3"}, owners(h)
    h.core.drain("p3")
    p3.beat()
    p2.beat()       # p3's tasks may now be planned to p2 ...
    h.core.drain("p2")      # ... which drains too
    h.sync()
    for _ in range(8):
        for p in procs:
            p.positions = at(1000, *ALL)
            p.beat()
    assert set(owners(h).values()) == {"p1"}, (owners(h), pending(h.core.picture))
    assert p2.reply is not None and p2.reply.stop
    assert p3.reply is not None and p3.reply.stop


def test_drain_of_a_dead_processor_is_refused() -> None:
    h = Harness()
    p1, p2 = start_two(h)
    h.clock.advance(6)
    p2.beat()
    with pytest.raises(DrainError, match="not alive"):
        h.core.drain("p1")


# ---- restart -------------------------------------------------------------------------


def test_restart_during_catching_up_continues_the_handoff() -> None:
    h = Harness()
    p1, p2 = start_two(h)
    moving = sorted(h.core.picture.handoffs)
    p2.beat()
    p2.positions = at(10, *moving)
    p2.beat()
    h.restart()
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"catching_up"}
    p1.beat()
    p2.positions = at(1000, *moving)
    p2.beat()
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"releasing"}
    p1.beat()
    p1.beat()
    p2.beat()
    p2.beat()
    assert not h.core.picture.handoffs
    assert {owners(h)[t] for t in moving} == {"p2"}


def test_restart_during_releasing_continues_the_handoff() -> None:
    h = Harness()
    p1, p2 = start_two(h)
    moving = catch_up_and_release(h, p1, p2)
    h.restart()
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"releasing"}
    assert all(owners(h)[t] is None for t in moving)
    p1.beat()
    p1.beat()
    p2.beat()
    p2.beat()
    assert not h.core.picture.handoffs
    assert {owners(h)[t] for t in moving} == {"p2"}


def test_restart_waits_for_reports_before_moving_anything() -> None:
    h = Harness()
    p1, p2 = start_two(h)
    h.restart()
    before = dict(h.core.picture.handoffs)
    h.tick(1.0)
    assert h.core.picture.handoffs == before  # nobody reported yet: no new decisions
    p3 = FakeProcessor(h, "p3")
    p3.register()
    assert h.core.picture.handoffs == before  # p1 and p2 still have not reported
    p1.beat()
    p2.beat()
    assert p1.reply is not None and p1.reply.alive


def test_restart_rebuilds_processors_and_model() -> None:
    h = Harness()
    p1 = FakeProcessor(h, "p1")
    p1.register()
    p1.beat()
    h.restart()
    assert h.core.picture.alive("p1-exec-1")
    assert h.core.picture.model.generation == 1
    assert p1.beat().alive and p1.listed() == set(ALL)


# ---- expansion and metrics -------------------------------------------------------------


def test_expansion_bumps_generation_and_sets_barriers() -> None:
    h = Harness(partitions=2)
    p1 = FakeProcessor(h, "p1")
    p1.register()
    grouping, parents = h.core.picture.model.plan_expansion([(TOPIC, 4)])
    h.core.apply_expansion(h.core.picture.model.expanded(grouping, parents, {"in:0": 7, "in:1": 9}))
    h.sync()
    reply = p1.beat()
    assert reply.generation == 2
    assert reply.tasks["Partition 0"] == ["in:0", "in:2"]
    assert reply.barriers["in:3"].parent == "in:1" and reply.barriers["in:3"].offset == 9
    assert h.stream["model"]["generation"] == 2
    h.core.refuse_expansion("input 'in' went from 4 to 6 partitions: ...")
    assert status(h.core.picture)["errors"]


def test_a_handoff_is_counted_when_it_ends_not_when_its_pause_is_known() -> None:
    """A task without traffic reports no pause; the counter must not wait for one."""
    h = Harness()
    p1, p2 = start_two(h)
    p2.pause_ms = None
    moving = catch_up_and_release(h, p1, p2)
    p1.beat()
    p1.beat()
    p2.beat()
    p2.beat()       # reports active, no pause yet: done
    assert not h.core.picture.handoffs
    assert h.metric("baton_handoffs_total", outcome="done") == len(moving)
    assert not h.metric("baton_handoff_pause_seconds_count")
    p2.pause_ms = 30.0
    p2.beat()       # its first output: the pause is observed, the count stays
    assert h.metric("baton_handoff_pause_seconds_count") == len(moving)
    assert h.metric("baton_handoffs_total", outcome="done") == len(moving)


