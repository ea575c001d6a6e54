"""The broker's floor under a handoff's steps (bench/_floor.py), on the tests' broker:
every step is measured, and the table that maps the pause's phases to them names only
steps it measures and every phase the phase reader knows."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devkit.handoff_phases import PHASES

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from _floor import FLOOR_OF, measure_floor  # noqa: E402 - a bench module, found by path

pytestmark = pytest.mark.integration


def test_every_step_of_a_handoff_has_its_floor(broker: Any) -> None:
    floor = measure_floor(broker.settings(), rounds=5)
    assert set(floor) == {"commit", "fence", "committed", "first_read"}
    for step, figures in floor.items():
        assert 0 < figures["p50"] <= figures["p99"] < 10_000, (step, figures)
    assert set(FLOOR_OF) == set(PHASES)
    assert {step for step in FLOOR_OF.values() if step is not None} == set(floor)
