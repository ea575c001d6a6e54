"""The pair harness: a coordinator's handoff driver and two fake processors on an
in-memory bus, interleavings forced by a script, exactly-once output checked."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.core.handoff import (
    TERMINAL_PHASES,
    final_owner,
)
from tests.orchestrator.core.handoff.handoff_pair import (
    PART,
    VALUES,
    Pair,
)
from tests.orchestrator.core.handoff.handoff_support import (
    CANCELLED,
    DONE,
    OTHER,
    S,
    T,
)


def test_pair_successful_handoff_survives_a_coordinator_restart() -> None:
    pair = Pair().run("""
        p1 process 10
        plan
        p2 recv        # StartWarmup
        p2 send        # WarmupStarted: catching_up
        p2 warm 4
        lag            # 6 behind: keep catching up
        p1 process 5
        p2 warm 10
        lag            # 1 behind: releasing, SendRelease queued for p1
        p1 process 3   # p1 has not heard yet and keeps going
        wait 3
        restart        # resumes releasing: re-arms its timer, sends the release again
        p1 recv        # both releases: two identical acknowledgements
        p1 send        # activating with final T1 = 18; the duplicate is ignored
        p1 process 5   # released: no output
        p2 recv        # fence, replay 14 -> 18 without output, active
        p2 process 4
        p2 send        # Activated: done
        p2 process 100
    """)
    pair.assert_exactly_once()
    assert pair.writers() == "p1*18 p2*12"
    assert pair.phases == ["planned", "catching_up", "releasing", "releasing", "activating",
                           "done"]
    handoff = pair.core.handoff
    assert handoff is not None and handoff.final_offsets == {PART: 18}
    assert final_owner(handoff) == T and pair.core.errors == []
    assert (pair.procs[S].role, pair.procs[T].role) == ("released", "active")


def test_pair_release_timeout_fences_the_silent_owner() -> None:
    pair = Pair().run("""
        p1 process 10
        plan
        p2 recv
        p2 send
        p2 warm 10
        lag            # caught up: SendRelease to p1, which never hears it
        p1 process 4   # the cut-off owner keeps writing: committed 14
        wait 9.9       # not yet
        timeout        # release timeout: DeclareDead(p1), SendActivate(p2, None)
        p1 process 2   # still before p2 fences it: a legitimate commit, 16
        p2 recv        # init_transactions fences p1; replay to the committed 16
        p1 process 3   # fenced: rejected, p1 stops the task
        p2 send        # done
        p1 recv        # alive: false
        p2 process 100
    """)
    pair.assert_exactly_once()
    assert pair.writers() == "p1*16 p2*14"
    handoff = pair.core.handoff
    assert handoff is not None and handoff.phase == DONE and handoff.source_declared_dead
    assert "p1 did not acknowledge the release within 10.0 s" in handoff.reason
    assert (pair.procs[S].role, pair.procs[T].role) == ("dead", "active")


@pytest.mark.parametrize("how", ["lose p2", "timeout"])
def test_pair_target_crash_mid_activation_returns_the_task(how: str) -> None:
    pair = Pair().run(f"""
        p1 process 10
        plan
        p2 recv
        p2 send
        p2 warm 10
        lag
        p1 recv        # release: final T1 = 10
        p1 send        # activating
        p2 recv        # fenced, replayed, active; Activated queued
        p2 process 3   # commits 3 outputs, then never reports
        {how}          # lost, or the activation timeout: DeclareDead(p2), ResumeOwner(p1)
        p2 process 2   # a zombie p2 still writes before p1 resumes
        p1 recv        # p1 fences p2, replays 10 -> 15 without output, active
        p2 process 2   # fenced
        p1 process 100
    """)
    pair.assert_exactly_once()
    assert pair.writers() == "p1*10 p2*5 p1*15"
    handoff = pair.core.handoff
    assert handoff is not None and handoff.phase == CANCELLED and final_owner(handoff) == S
    assert pair.phases[-1] == "cancelled" and pair.procs[T].role == "fenced"


# One turn of a healthy system; the random schedule skips steps and injects faults.
PROGRESS = ["p1 process", "p2 recv", "p2 send", "p2 warm", "lag", "p1 recv", "p1 send"]
FAULTS = ["p1 process", "p2 process", "p1 recv", "p2 recv", "p1 send", "p2 send", "wait",
          "timeout", "p1 crash", "p2 crash", "lose p1", "lose p2", "cancel", "restart"]


def heal(pair: Pair) -> None:
    """No more faults: deliver, report, and let timeouts fire until the handoff ends."""
    for _ in range(40):
        before = (pair.core.handoff, len(pair.core.stream))
        for pid in (S, T, OTHER):
            pair.procs[pid].receive()
            pair.core.collect(pid)
        pair.procs[T].warm(len(VALUES))
        pair.core.report_lag()
        handoff = pair.core.handoff
        assert handoff is not None
        if handoff.phase in TERMINAL_PHASES and not any(p.inbox for p in pair.procs.values()):
            return
        if (handoff, len(pair.core.stream)) == before:
            pair.core.timeout()
    raise AssertionError(f"no progress: {pair.core.handoff}")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.integers(0, 8), schedule=st.lists(st.tuples(
    st.booleans(), st.one_of(st.none(), st.none(), st.sampled_from(FAULTS)), st.integers(1, 8)),
    max_size=40))
def test_pair_random_interleavings_keep_exactly_once(
        first: int, schedule: list[tuple[bool, str | None, int]]) -> None:
    pair = Pair()
    pair.act("p1", "process", str(first))
    pair.act("plan")
    turn = 0
    for progress, fault, n in schedule:
        actions = [PROGRESS[turn % len(PROGRESS)]] if progress else []
        turn += progress
        for action in actions + ([fault] if fault else []):
            verb, *rest = action.split()
            if rest in (["process"], ["warm"]):
                pair.act(verb, rest[0], str(n))
            elif verb == "wait":
                pair.act("wait", str(n * 2))
            else:
                pair.act(verb, *rest)
    heal(pair)
    handoff = pair.core.handoff
    assert handoff is not None
    owner = final_owner(handoff)
    if owner is None or pair.procs[owner].role != "active":
        # nobody left (or the owner crashed): the assignor places the task on p3
        assert owner is None or pair.procs[owner].role in ("crashed", "dead"), pair.procs[owner]
        pair.core.plan(None, OTHER)
        heal(pair)
        assert pair.core.handoff is not None and pair.core.handoff.phase == DONE
        owner = OTHER
    pair.procs[owner].process(len(VALUES))
    pair.assert_exactly_once()
