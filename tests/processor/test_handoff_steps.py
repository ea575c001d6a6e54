"""A new owner's steps of a handoff (processor/handoff_steps.py): each from the end of
the one before it, and only those whose stamps both exist."""

from __future__ import annotations

from processor.handoff_steps import ACTIVATION_STEPS, step_ms


def test_each_step_runs_from_the_end_of_the_one_before() -> None:
    stamps = {"began": 10.0, "fence": 10.05, "t1": 10.06, "replay": 10.08,
              "first_read": 10.1, "first_commit": 10.125}
    steps = step_ms(stamps)
    assert list(steps) == list(ACTIVATION_STEPS)
    assert steps == {"fence": 50.0, "t1": 10.0, "replay": 20.0, "first_read": 20.0,
                     "first_commit": 25.0}
    assert abs(sum(steps.values()) - (stamps["first_commit"] - stamps["began"]) * 1000) < 0.5


def test_a_step_not_reached_is_left_out() -> None:
    assert step_ms({"began": 1.0, "fence": 1.01, "t1": 1.02}) == {"fence": 10.0, "t1": 10.0}
    assert step_ms({}) == {}
