"""The handoff's values (orchestrator/core/handoff/events.py): phases, config, records."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from orchestrator.core.handoff import (
    Handoff,
    HandoffConfig,
    LocalHandoffError,
    Phase,
)
from tests.orchestrator.core.handoff.handoff_support import (
    ACTIVATING,
    CATCHING_UP,
    OFFS,
    at,
)


def test_phase_strings_are_pinned() -> None:
    assert [p.value for p in Phase] == [
        "planned", "catching_up", "releasing", "activating", "done", "cancelled"]


def test_handoff_refuses_pre_release_phase_without_source() -> None:
    with pytest.raises(LocalHandoffError, match="needs a source"):
        at(CATCHING_UP, source=None)


@pytest.mark.parametrize("bad", [
    {"acceptable_lag": -1}, {"release_timeout_s": 0}, {"activate_timeout_s": -2.0},
    {"catch_up_timeout_s": 0.0}])
def test_config_refuses_nonsense(bad: dict[str, Any]) -> None:
    with pytest.raises(LocalHandoffError, match=next(iter(bad))):
        HandoffConfig(**bad)


def test_record_is_plain_json_and_tolerates_unknown_keys() -> None:
    handoff = at(ACTIVATING, reason="r", lag=3, source_declared_dead=True)
    record = json.loads(json.dumps(handoff.to_dict()))
    assert record["phase"] == "activating" and record["final_offsets"] == OFFS
    assert Handoff.from_dict({**record, "added_later": 1}) == handoff
    minimal = {k: record[k] for k in ("task", "source", "target", "phase", "since",
                                      "final_offsets")}
    assert Handoff.from_dict(minimal) == replace(handoff, reason="", lag=None,
                                                 source_declared_dead=False)


def test_metrics_phase_vocabulary_is_the_machine_s() -> None:
    """One source of truth: the in-flight phases the metrics label are the machine's."""
