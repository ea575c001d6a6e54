"""The wire protocol's task reports (orchestrator/wire/protocol.py): T1 and T2 in fields
of their own, and a previous version's one `positions` field read by role."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from orchestrator.wire.protocol import T1_ROLES, HeartbeatRequest, TaskReport


@pytest.mark.parametrize("role", ["active", "released"])
def test_an_owner_reports_t1(role: str) -> None:
    report = TaskReport.model_validate({"task": "t", "role": role, "committed": {"in:0": 7}})
    assert report.committed == {"in:0": 7} and report.applied == {}
    assert report.offsets() == {"in:0": 7}


@pytest.mark.parametrize("role", ["warmup", "standby", "activating"])
def test_a_replica_reports_t2(role: str) -> None:
    report = TaskReport.model_validate({"task": "t", "role": role, "applied": {"in:0": 3}})
    assert report.applied == {"in:0": 3} and report.committed == {}
    assert report.offsets() == {"in:0": 3}


@pytest.mark.parametrize("role", ["active", "released", "warmup", "standby", "activating"])
def test_the_previous_versions_positions_are_read_by_role(role: str) -> None:
    """A processor not yet upgraded sends `positions`; an upgraded coordinator reads it
    as T1 or T2, and never sends it back."""
    request = HeartbeatRequest.model_validate_json(json.dumps({
        "processor_id": "p1", "execution_id": "e",
        "tasks": [{"task": "t", "role": role, "positions": {"in:0": 5}}]}))
    report = request.tasks[0]
    assert (report.committed if role in T1_ROLES else report.applied) == {"in:0": 5}
    assert report.offsets() == {"in:0": 5}
    assert "positions" not in report.model_dump()


def test_an_unknown_field_is_still_refused() -> None:
    with pytest.raises(ValidationError, match="offsets"):
        TaskReport.model_validate({"task": "t", "role": "active", "offsets": {}})
