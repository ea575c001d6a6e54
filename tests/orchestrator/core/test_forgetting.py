"""Forgetting dead processors (orchestrator/core/forgetting.py): the pure decisions on
plain data, then the core on a fake clock: by an operator, on its own after
`forget_dead_after_s`, persisted so a restarted core keeps it, and a forgotten
execution that still runs is told it is dead."""

from __future__ import annotations

import pytest

from orchestrator.core import forgetting
from orchestrator.core.coordinator import DrainError, ForgetError, UnknownProcessor
from orchestrator.core.liveness import FORGOTTEN_KEPT, Liveness, Processor
from orchestrator.core.views import status
from tests.orchestrator.core.coordinator_harness import (
    ALL,
    FakeProcessor,
    Harness,
    at,
    owners,
)

# ---- the pure decisions -------------------------------------------------------------------


def _dead(pid: str, died_at: float | None = 100.0) -> Processor:
    return Processor(pid, f"{pid}-x", valid=False, reason="silent", died_at=died_at)


def test_a_live_processor_is_refused_naming_drain() -> None:
    why = forgetting.refusal(Processor("p1", "p1-x"), set())
    assert why is not None and "'p1' is alive (execution p1-x)" in why
    assert "baton drain --processor p1" in why


def test_a_dead_processor_a_handoff_names_waits() -> None:
    why = forgetting.refusal(_dead("p1"), {"p1", "p2"})
    assert why is not None and "handoff in flight still names it" in why
    assert forgetting.refusal(_dead("p1"), {"p2"}) is None


@pytest.mark.parametrize(("after_s", "now", "expected"), [
    (0.0, 10_000.0, []),            # 0: never on its own
    (60.0, 159.0, []),              # dead 59 s
    (60.0, 160.0, ["p1"]),          # dead 60 s
    (60.0, 10_000.0, ["p1"]),
])
def test_due_after_the_configured_time(after_s: float, now: float,
                                       expected: list[str]) -> None:
    processors = [_dead("p1"), Processor("p2", "p2-x"), _dead("p3", died_at=None)]
    assert forgetting.due(processors, set(), now, after_s) == expected


def test_due_leaves_one_a_handoff_names() -> None:
    assert forgetting.due([_dead("p1")], {"p1"}, 10_000.0, 60.0) == []


def test_forgotten_executions_are_bounded_oldest_first() -> None:
    liveness = Liveness()
    for n in range(FORGOTTEN_KEPT + 5):
        liveness.add(_dead(f"p{n}"))
        liveness.forget(f"p{n}")
    assert len(liveness.forgotten) == FORGOTTEN_KEPT
    assert "p0" not in liveness.forgotten and f"p{FORGOTTEN_KEPT + 4}" in liveness.forgotten


# ---- the core -----------------------------------------------------------------------------


def _p1_dead(h: Harness) -> tuple[FakeProcessor, FakeProcessor]:
    """p1 and p2 registered; p1 silent past the timeout: dead, its tasks on p2."""
    p1, p2 = FakeProcessor(h, "p1"), FakeProcessor(h, "p2")
    p1.register()
    p2.register()
    p1.beat()
    p2.beat()
    for _ in range(6):
        h.clock.advance(1)
        p2.positions = at(1000, *ALL)
        p2.beat()
    assert not h.core.picture.processors.get("p1").valid   # type: ignore[union-attr]
    assert set(owners(h).values()) == {"p2"}
    assert h.metric("baton_processors", state="dead") == 1
    [dead] = [p for p in status(h.core.picture)["processors"] if p["id"] == "p1"]
    assert not dead["alive"] and 0 < dead["dead_for_s"] <= 2
    return p1, p2


def test_an_operator_forgets_a_dead_processor() -> None:
    h = Harness()
    _p1_dead(h)
    assert h.stream["processor/p1"]["died_at"] == pytest.approx(h.clock.time() - 1, abs=2)
    result = h.core.forget("p1")
    h.sync()
    assert result == {"processor": "p1", "forgotten": True, "execution_id": "p1-exec-1",
                      "reason": result["reason"]} and "silent" in result["reason"]
    assert "processor/p1" not in h.stream
    assert h.stream["forgotten"] == {"p1": "p1-exec-1"}
    assert [p["id"] for p in status(h.core.picture)["processors"]] == ["p2"]
    assert h.metric("baton_processors", state="dead") == 0
    assert h.metric("baton_processors", state="alive") == 1


def test_forget_refuses_a_live_processor_and_an_unknown_one() -> None:
    h = Harness()
    _p1_dead(h)
    with pytest.raises(ForgetError, match="'p2' is alive"):
        h.core.forget("p2")
    with pytest.raises(UnknownProcessor, match="no processor 'p7'; known: p1, p2"):
        h.core.forget("p7")
    assert h.core.picture.processors.get("p2") is not None


def _beating(h: Harness, p2: FakeProcessor, seconds: int) -> None:
    for _ in range(seconds):
        h.clock.advance(1)
        p2.beat()
        h.tick()


def test_a_dead_processor_is_forgotten_on_its_own_and_stays_forgotten_after_a_restart(
        ) -> None:
    h = Harness(forget_dead_after_s=30.0)
    _, p2 = _p1_dead(h)
    _beating(h, p2, 20)
    assert "processor/p1" in h.stream, "dead for about 20 s of 30: kept"
    h.restart(wall_goes_on=True)    # a new leader: p1 died when the stream says it did
    p2.beat()
    _beating(h, p2, 8)
    assert "processor/p1" in h.stream, "dead for about 28 s of 30: kept"
    _beating(h, p2, 4)
    assert "processor/p1" not in h.stream
    assert h.metric("baton_processors", state="dead") == 0
    assert h.metric("baton_processors", state="alive") == 1
    h.restart(wall_goes_on=True)
    assert h.core.picture.processors.get("p1") is None
    assert h.core.picture.processors.forgotten == {"p1": "p1-exec-1"}


def test_a_forgotten_execution_that_still_runs_is_told_it_is_dead() -> None:
    h = Harness()
    p1, _ = _p1_dead(h)
    h.core.forget("p1")
    h.sync()
    reply = p1.beat()
    assert not reply.alive and not reply.unknown, "not invited to register again"
    assert not p1.register().alive
    assert h.core.picture.processors.get("p1") is None
    again = FakeProcessor(h, "p1", execution="p1-exec-2")      # restarted: a new execution
    assert again.register().alive
    h.sync()
    assert "forgotten" not in h.stream and h.stream["processor/p1"]["valid"]


def test_a_drain_of_a_dead_processor_names_forget() -> None:
    h = Harness()
    _p1_dead(h)
    with pytest.raises(DrainError, match="baton forget --processor p1"):
        h.core.drain("p1")
