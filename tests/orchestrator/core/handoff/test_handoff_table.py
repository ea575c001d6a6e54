"""The handoff table (orchestrator/core/handoff/table.py): one test per row, and the
rows cover every (phase, event) pair."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from orchestrator.core.handoff import (
    TERMINAL_PHASES,
    TRANSITIONS,
    Activated,
    Cancel,
    Command,
    DeclareDead,
    Event,
    Handoff,
    LagReported,
    LocalHandoffError,
    Persist,
    Phase,
    ProcessorLost,
    ReleaseAcked,
    RemoteHandoffError,
    ReplicaFailed,
    ResumeOwner,
    SendActivate,
    SendRelease,
    StopWarmup,
    Tick,
    WarmupStarted,
    final_owner,
    step,
)
from tests.orchestrator.core.handoff.handoff_support import (
    ACTIVATING,
    CANCELLED,
    CATCHING_UP,
    CFG,
    DONE,
    FORCED,
    NO_SOURCE,
    OFFS,
    OTHER,
    PLANNED,
    RELEASING,
    T0,
    TASK,
    S,
    T,
    at,
    roundtrip,
)

# ---- table rows ----------------------------------------------------------------------

IGNORE = "ignore"


@dataclass(frozen=True)
class Go:
    """Expected: a persisted transition to `phase` with these commands after Persist."""

    phase: Phase
    commands: list[Command]
    owner: str | None = "?"  # final_owner() when `phase` is terminal
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Noted:
    """Expected: only the advisory lag changes; nothing persisted, no commands."""

    lag: int


FORCE: list[Command] = [DeclareDead(S), SendActivate(TASK, T, None)]
STOP: list[Command] = [StopWarmup(TASK, T)]
ROWS: list[tuple[Handoff, Event, Any]] = [
    # planned
    (at(PLANNED), WarmupStarted(), Go(CATCHING_UP, [])),
    (at(PLANNED), WarmupStarted(T), Go(CATCHING_UP, [])),
    (at(PLANNED), WarmupStarted(OTHER), RemoteHandoffError),
    (at(PLANNED), LagReported(5), Noted(5)),
    (at(PLANNED), ReleaseAcked(OFFS), RemoteHandoffError),
    (at(PLANNED), Activated(), RemoteHandoffError),
    (at(PLANNED), ProcessorLost(S), Go(ACTIVATING, FORCE, fields={"source_declared_dead": True})),
    (at(PLANNED), ProcessorLost(T), Go(CANCELLED, STOP, owner=S)),
    (at(PLANNED), ProcessorLost(OTHER), IGNORE),
    (at(PLANNED), Tick(T0 + 59.9), IGNORE),
    (at(PLANNED), Tick(T0 + 60), Go(CANCELLED, STOP, owner=S)),
    (at(PLANNED), Cancel("operator"), Go(CANCELLED, STOP, owner=S)),
    (at(PLANNED), ReplicaFailed("store locked"), Go(CANCELLED, STOP, owner=S)),
    (at(PLANNED), ReplicaFailed("boom", OTHER), RemoteHandoffError),
    # catching_up
    (at(CATCHING_UP), WarmupStarted(), IGNORE),
    (at(CATCHING_UP), LagReported(101), Noted(101)),
    (at(CATCHING_UP), LagReported(100), Go(RELEASING, [SendRelease(TASK, S)], fields={"lag": 100})),
    (at(CATCHING_UP), LagReported(-3), Go(RELEASING, [SendRelease(TASK, S)])),
    (at(CATCHING_UP), ReleaseAcked(OFFS), RemoteHandoffError),
    (at(CATCHING_UP), Activated(), RemoteHandoffError),
    (at(CATCHING_UP), ProcessorLost(S), Go(ACTIVATING, FORCE)),
    (at(CATCHING_UP), ProcessorLost(T), Go(CANCELLED, STOP, owner=S)),
    (at(CATCHING_UP), ProcessorLost(OTHER), IGNORE),
    (at(CATCHING_UP), Tick(T0 + 59.9), IGNORE),
    (at(CATCHING_UP), Tick(T0 + 60), Go(CANCELLED, STOP, owner=S)),
    (at(CATCHING_UP), Cancel("assignor"), Go(CANCELLED, STOP, owner=S)),
    (at(CATCHING_UP), ReplicaFailed("boom", T), Go(CANCELLED, STOP, owner=S)),
    # releasing
    (at(RELEASING), WarmupStarted(), IGNORE),
    (at(RELEASING), LagReported(7), Noted(7)),
    (at(RELEASING), ReleaseAcked(OFFS), Go(ACTIVATING, [SendActivate(TASK, T, OFFS)],
                                          fields={"final_offsets": OFFS})),
    (at(RELEASING), ReleaseAcked(OFFS, S), Go(ACTIVATING, [SendActivate(TASK, T, OFFS)])),
    (at(RELEASING), ReleaseAcked(OFFS, T), RemoteHandoffError),
    (at(RELEASING), ReleaseAcked({"events": 1}), RemoteHandoffError),
    (at(RELEASING), ReleaseAcked({"events:0": -1}), RemoteHandoffError),
    (at(RELEASING), ReleaseAcked({"events:0": True}), RemoteHandoffError),
    (at(RELEASING), Activated(), RemoteHandoffError),
    (at(RELEASING), ProcessorLost(S), Go(ACTIVATING, FORCE, fields={"final_offsets": None})),
    (at(RELEASING), ProcessorLost(T), Go(CANCELLED, STOP + [ResumeOwner(TASK, S)], owner=S)),
    (at(RELEASING), ProcessorLost(OTHER), IGNORE),
    (at(RELEASING), Tick(T0 + 9.99), IGNORE),
    (at(RELEASING), Tick(T0 + 10), Go(ACTIVATING, FORCE, fields={"source_declared_dead": True})),
    (at(RELEASING), Cancel("x"), Go(CANCELLED, STOP + [ResumeOwner(TASK, S)], owner=S)),
    (at(RELEASING), ReplicaFailed("boom"), Go(CANCELLED, STOP + [ResumeOwner(TASK, S)],
                                              owner=S)),
    # activating, after a release acknowledgement
    (at(ACTIVATING), WarmupStarted(), IGNORE),
    (at(ACTIVATING), LagReported(3), IGNORE),
    (at(ACTIVATING), ReleaseAcked(OFFS), IGNORE),
    (at(ACTIVATING), ReleaseAcked({"events:0": 43, "events:1": 7}), RemoteHandoffError),
    (at(ACTIVATING), Activated(), Go(DONE, [], owner=T)),
    (at(ACTIVATING), Activated(T), Go(DONE, [], owner=T)),
    (at(ACTIVATING), Activated(S), RemoteHandoffError),
    (at(ACTIVATING), ProcessorLost(S), Go(ACTIVATING, [], fields={"source_declared_dead": True})),
    (at(ACTIVATING), ProcessorLost(T),
     Go(CANCELLED, [DeclareDead(T), ResumeOwner(TASK, S)], owner=S)),
    (at(ACTIVATING), ProcessorLost(OTHER), IGNORE),
    (at(ACTIVATING), Tick(T0 + 29.9), IGNORE),
    (at(ACTIVATING), Tick(T0 + 30), Go(CANCELLED, [DeclareDead(T), ResumeOwner(TASK, S)],
                                       owner=S)),
    (at(ACTIVATING), Cancel("x"), LocalHandoffError),
    (at(ACTIVATING), ReplicaFailed("fence failed"), Go(CANCELLED, [ResumeOwner(TASK, S)],
                                                        owner=S)),
    # activating after the source was declared dead, or without a source
    (FORCED, ReleaseAcked({"events:0": 1}), IGNORE),  # late ack from a fenced owner
    (FORCED, ProcessorLost(S), IGNORE),
    (FORCED, ProcessorLost(T), Go(CANCELLED, [DeclareDead(T)], owner=None)),
    (FORCED, Tick(T0 + 30), Go(CANCELLED, [DeclareDead(T)], owner=None)),
    (FORCED, Activated(), Go(DONE, [], owner=T)),
    (FORCED, ReplicaFailed("boom"), Go(CANCELLED, [], owner=None)),
    (NO_SOURCE, ReleaseAcked(OFFS), RemoteHandoffError),
    (NO_SOURCE, ReleaseAcked(OFFS, S), RemoteHandoffError),
    (NO_SOURCE, ProcessorLost(T), Go(CANCELLED, [DeclareDead(T)], owner=None)),
    (NO_SOURCE, Activated(), Go(DONE, [], owner=T)),
    # done: stale news is ignored; cancelling is our own mistake
    (at(DONE), WarmupStarted(), IGNORE),
    (at(DONE), LagReported(1), IGNORE),
    (at(DONE), ReleaseAcked(OFFS), IGNORE),
    (at(DONE), Activated(), IGNORE),
    (at(DONE), Activated(S), RemoteHandoffError),
    (at(DONE), ProcessorLost(T), IGNORE),
    (at(DONE), Tick(T0 + 1e6), IGNORE),
    (at(DONE), Cancel("x"), LocalHandoffError),
    (at(DONE), ReplicaFailed("boom"), IGNORE),
    # cancelled: stale news is ignored; a target claiming the task is reported
    (at(CANCELLED), WarmupStarted(), IGNORE),
    (at(CANCELLED), LagReported(1), IGNORE),
    (at(CANCELLED), ReleaseAcked(OFFS), IGNORE),
    (at(CANCELLED), Activated(), RemoteHandoffError),
    (at(CANCELLED), ProcessorLost(S), IGNORE),
    (at(CANCELLED), Tick(T0 + 1e6), IGNORE),
    (at(CANCELLED), Cancel("again"), IGNORE),
    (at(CANCELLED), ReplicaFailed("boom"), IGNORE),
]


def _row_id(row: tuple[Handoff, Event, Any]) -> str:
    start, event, _ = row
    variant = "forced" if start.source_declared_dead else "nosource" if start.source is None else ""
    return f"{start.phase}{variant and '/' + variant}-{event!r}"


@pytest.mark.parametrize("start,event,expect", ROWS, ids=[_row_id(r) for r in ROWS])
def test_transition_row(start: Handoff, event: Event, expect: Any) -> None:
    now = event.now if isinstance(event, Tick) else T0 + 5
    if isinstance(expect, type):
        with pytest.raises(expect) as raised:
            step(start, event, CFG, now)
        assert TASK in str(raised.value) and str(start.phase) in str(raised.value)
        return
    new, commands = step(start, event, CFG, now)
    if expect == IGNORE:
        assert (new, commands) == (start, [])
    elif isinstance(expect, Noted):
        assert (new, commands) == (replace(start, lag=expect.lag), [])
    else:
        assert new.phase == expect.phase
        assert commands == [Persist(new), *expect.commands]
        assert new.since == (now if new.phase != start.phase else start.since)
        for name, value in expect.fields.items():
            assert getattr(new, name) == value, name
        if new.phase in TERMINAL_PHASES:
            assert final_owner(new) == expect.owner
            assert new.phase == DONE or new.reason
        assert roundtrip(new) == new


def test_table_covers_every_phase_and_event_and_rows_cover_the_table() -> None:
    events = {WarmupStarted, LagReported, ReleaseAcked, Activated, ProcessorLost, Tick, Cancel,
              ReplicaFailed}
    assert set(TRANSITIONS) == {(phase, ev) for phase in Phase for ev in events}
    assert {(start.phase, type(event)) for start, event, _ in ROWS} == set(TRANSITIONS)


