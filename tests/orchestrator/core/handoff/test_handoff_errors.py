"""Who is to blame (orchestrator/core/handoff/errors.py): a peer's protocol violation
names the processor and the next action; the coordinator's misuse is local."""

from __future__ import annotations

import pytest

from orchestrator.core.handoff import (
    Activated,
    LocalHandoffError,
    Phase,
    ReleaseAcked,
    RemoteHandoffError,
    WarmupStarted,
    step,
)
from tests.orchestrator.core.handoff.handoff_support import (
    ACTIVATING,
    CFG,
    OFFS,
    OTHER,
    PLANNED,
    RELEASING,
    T0,
    S,
    T,
    at,
)


def test_remote_error_names_the_processor_and_next_action() -> None:
    with pytest.raises(RemoteHandoffError) as raised:
        step(at(ACTIVATING), ReleaseAcked({"events:0": 50, "events:1": 7}, S), CFG, T0)
    assert raised.value.processor == S
    assert "events:0" in str(raised.value) and "Next:" in str(raised.value)
    with pytest.raises(RemoteHandoffError, match="events:0x"):
        step(at(RELEASING), ReleaseAcked({"events:0x": 1}), CFG, T0)


def test_wrong_processor_is_remote_in_every_phase() -> None:
    for phase in Phase:
        start = at(phase)
        for event in (Activated(OTHER), WarmupStarted(S), ReleaseAcked(OFFS, T)):
            with pytest.raises(RemoteHandoffError) as raised:
                step(start, event, CFG, T0)
            assert raised.value.processor in (OTHER, S, T)


def test_not_an_event_is_local() -> None:
    with pytest.raises(LocalHandoffError, match="not a handoff event"):
        step(at(PLANNED), "WarmupStarted", CFG, T0)  # type: ignore[arg-type]
