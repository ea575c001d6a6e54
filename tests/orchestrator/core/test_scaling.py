"""What `baton autoscale` does next (orchestrator/core/scaling.py): one rule a test."""

from __future__ import annotations

from typing import Any

from orchestrator.core.scaling import (
    Bounds,
    Expand,
    Hold,
    ScaleIn,
    ScaleOut,
    Situation,
    Tidy,
    Wait,
    next_step,
)


def proc(pid: str, active: int = 1, alive: bool = True, draining: bool = False
         ) -> dict[str, Any]:
    return {"id": pid, "alive": alive, "draining": draining,
            "active": [f"Partition {i}" for i in range(active)], "warmup": [], "standby": []}


def status(*processors: dict[str, Any], recommended: int | None = 2, tasks: int = 4,
           handoffs: int = 0, balanced: bool = True, expand: bool = False) -> dict[str, Any]:
    return {"processors": list(processors), "recommended_processors": recommended,
            "autoscale": {"reason": "because", "expand": expand},
            "tasks": [{"name": f"Partition {i}", "partitions": [f"events:{i}"]}
                      for i in range(tasks)],
            "handoffs": [{"task": "Partition 0"}] * handoffs, "balanced": balanced}


ANY_COUNT = Bounds()


def step(s: dict[str, Any], started: dict[str, bool] | None = None,
         bounds: Bounds = ANY_COUNT) -> Any:
    return next_step(Situation(s, started or {}, bounds, "auto-"))


def test_at_the_recommendation_it_holds() -> None:
    assert step(status(proc("p1", 2), proc("p2", 2))) == Hold("because")


def test_scale_out_by_the_difference_with_free_ids() -> None:
    found = step(status(proc("p1", 4), proc("auto-1", 0, alive=False), recommended=4),
                 started={"auto-2": True})
    # auto-2 is started and not registered: wait for it before anything else
    assert isinstance(found, Wait) and "auto-2" in found.reason
    found = step(status(proc("p1", 4), proc("auto-2", 0), recommended=4),
                 started={"auto-2": True})
    assert found == ScaleOut(("auto-1", "auto-3"), 2, 4, "because")


def test_scale_in_by_the_difference_the_least_loaded_started_newest_first() -> None:
    s = status(proc("p1", 1), proc("auto-1", 1), proc("auto-2", 1), proc("p2", 1),
               recommended=1)
    assert step(s, started={"auto-1": True, "auto-2": True}) == ScaleIn(
        ("auto-2", "auto-1", "p2"), 4, 1, "because")
    s = status(proc("p1", 1), proc("auto-1", 1), proc("auto-2", 1), proc("p2", 1),
               recommended=3)
    assert step(s, started={"auto-1": True, "auto-2": True}).processors == ("auto-2",)
    s = status(proc("p1", 1), proc("auto-1", 2), recommended=1)
    assert step(s, started={"auto-1": True}).processors == ("p1",)


def test_bounds_override_the_recommendation() -> None:
    s = status(proc("p1", 2), proc("p2", 2), recommended=1)
    assert isinstance(step(s, bounds=Bounds(least=2)), Hold)
    s = status(proc("p1", 4), recommended=4)
    found = step(s, bounds=Bounds(least=1, most=2))
    assert isinstance(found, ScaleOut) and found.processors == ("auto-1",)
    assert "bounded to 2" in found.reason


def test_waits_while_anything_moves() -> None:
    assert isinstance(step(status(proc("p1"), recommended=None)), Wait)
    assert "drain of p2" in step(status(proc("p1"), proc("p2", draining=True),
                                        recommended=1)).reason
    assert "handoff" in step(status(proc("p1"), handoffs=1, recommended=3)).reason
    assert "target assignment" in step(status(proc("p1"), balanced=False,
                                              recommended=3)).reason


def test_a_started_processor_that_is_gone_is_tidied_first() -> None:
    s = status(proc("p1", 4), proc("auto-1", 0, alive=False), recommended=1)
    assert step(s, started={"auto-1": False}) == Tidy(("auto-1",),
                                                      "auto-1 stopped (drained, or gone)")
    # the coordinator holds it dead although the launcher cannot tell (command)
    assert isinstance(step(s, started={"auto-1": True}), Tidy)
    # ended before it ever registered
    assert step(status(proc("p1", 4)), started={"auto-2": False}).processors == ("auto-2",)


def test_expand_past_the_task_count_only_when_recommended() -> None:
    s = status(*(proc(f"p{i}") for i in range(4)), recommended=4, expand=True)
    assert step(s) == Expand({"events": 8}, 4, 4, step(s).reason)
    assert isinstance(step(status(*(proc(f"p{i}") for i in range(4)), recommended=4)), Hold)
    assert isinstance(step(s, bounds=Bounds(most=4)), Hold)
