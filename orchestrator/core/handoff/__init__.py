"""The handoff state machine (see `machine` for the rules and theory of operation)."""

from __future__ import annotations

from orchestrator.core.handoff.errors import HandoffError, LocalHandoffError, RemoteHandoffError
from orchestrator.core.handoff.events import (
    DEFAULT_ACCEPTABLE_LAG,
    DEFAULT_ACTIVATE_TIMEOUT_S,
    DEFAULT_RELEASE_TIMEOUT_S,
    TERMINAL_PHASES,
    Activated,
    Cancel,
    Command,
    DeclareDead,
    Event,
    Handoff,
    HandoffConfig,
    LagReported,
    Persist,
    Phase,
    ProcessorLost,
    ReleaseAcked,
    ReplicaFailed,
    ResumeOwner,
    SendActivate,
    SendRelease,
    StartWarmup,
    StopWarmup,
    Tick,
    WarmupStarted,
)
from orchestrator.core.handoff.machine import (
    TRANSITIONS,
    final_owner,
    next_deadline,
    plan,
    resume,
    step,
)

__all__ = [
    "Activated", "Cancel", "Command", "DEFAULT_ACCEPTABLE_LAG",
    "DEFAULT_ACTIVATE_TIMEOUT_S", "DEFAULT_RELEASE_TIMEOUT_S", "DeclareDead", "Event",
    "Handoff", "HandoffConfig", "HandoffError", "LagReported", "LocalHandoffError",
    "Persist", "Phase", "ProcessorLost", "ReleaseAcked", "RemoteHandoffError", "ReplicaFailed",
    "ResumeOwner", "SendActivate", "SendRelease", "StartWarmup", "StopWarmup",
    "TERMINAL_PHASES", "TRANSITIONS", "Tick", "WarmupStarted", "final_owner",
    "next_deadline", "plan", "resume", "step",
]
