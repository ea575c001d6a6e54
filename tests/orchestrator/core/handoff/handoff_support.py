"""What the handoff tests share: the processors, the task, the config, and handoffs
in a given phase."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.core.handoff import (
    Handoff,
    HandoffConfig,
    Phase,
)

S, T, OTHER, TASK = "p1", "p2", "p3", "Partition 0"
CFG = HandoffConfig(acceptable_lag=100, release_timeout_s=10.0, activate_timeout_s=30.0,
                    catch_up_timeout_s=60.0)
T0 = 100.0
OFFS = {"events:0": 42, "events:1": 7}
PLANNED, CATCHING_UP, RELEASING = Phase.PLANNED, Phase.CATCHING_UP, Phase.RELEASING
ACTIVATING, DONE, CANCELLED = Phase.ACTIVATING, Phase.DONE, Phase.CANCELLED
ORDER = [PLANNED, CATCHING_UP, RELEASING, ACTIVATING, DONE]


def at(phase: Phase, **fields: Any) -> Handoff:
    """A handoff of TASK from S to T that entered `phase` at T0."""
    base: dict[str, Any] = {"task": TASK, "source": S, "target": T, "phase": phase, "since": T0}
    if phase in (ACTIVATING, DONE):
        base["final_offsets"] = dict(OFFS)
    return Handoff(**{**base, **fields})


def roundtrip(handoff: Handoff) -> Handoff:
    return Handoff.from_dict(json.loads(json.dumps(handoff.to_dict())))


FORCED = at(ACTIVATING, final_offsets=None, source_declared_dead=True)  # release timed out
NO_SOURCE = at(ACTIVATING, source=None, final_offsets=None)
