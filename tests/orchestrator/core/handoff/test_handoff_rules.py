"""The rules (orchestrator/core/handoff/rules.py): the reasons they write, the offsets
they keep."""

from __future__ import annotations

import pytest

from orchestrator.core.handoff import (
    Cancel,
    LocalHandoffError,
    ProcessorLost,
    ReleaseAcked,
    SendActivate,
    Tick,
    step,
)
from tests.orchestrator.core.handoff.handoff_support import (
    ACTIVATING,
    CATCHING_UP,
    CFG,
    FORCED,
    OFFS,
    RELEASING,
    T0,
    TASK,
    T,
    at,
)


def test_step_messages_are_formatted() -> None:
    done, _ = step(at(CATCHING_UP, lag=500), Tick(T0 + 61), CFG, T0 + 61)
    assert done.reason == ("catch-up timeout: p2 still lags 500 records (acceptable 100) "
                           "after 61.0 s")
    forced, _ = step(at(RELEASING), Tick(T0 + 10), CFG, T0 + 10)
    assert "p1 did not acknowledge the release within 10.0 s" in forced.reason
    gone, _ = step(FORCED, ProcessorLost(T), CFG, T0)
    assert "no owner left" in gone.reason
    cancelled, _ = step(at(RELEASING), Cancel("scale-in aborted {x}"), CFG, T0)
    assert "scale-in aborted {x}" in cancelled.reason
    with pytest.raises(LocalHandoffError, match="p2 was told to activate"):
        step(at(ACTIVATING), Cancel("x"), CFG, T0)


def test_release_ack_offsets_are_copied() -> None:
    offsets = dict(OFFS)
    new, commands = step(at(RELEASING), ReleaseAcked(offsets), CFG, T0)
    offsets["events:0"] = 0
    assert new.final_offsets == OFFS and commands[1] == SendActivate(TASK, T, OFFS)
