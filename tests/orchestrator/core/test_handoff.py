"""The handoff state machine: one test per table row, random event sequences against an
ownership model, and a pair harness (coordinator core + two fake processors on an
in-memory bus, interleavings forced by a script) that checks exactly-once output.

Also the injected clock (`orchestrator.wire.clock`), which the timeouts rely on.
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from orchestrator.core.handoff import (
    TERMINAL_PHASES,
    TRANSITIONS,
    Activated,
    Cancel,
    Command,
    DeclareDead,
    Event,
    Handoff,
    HandoffConfig,
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
    StartWarmup,
    StopWarmup,
    Tick,
    WarmupStarted,
    final_owner,
    next_deadline,
    plan,
    resume,
    step,
)
from orchestrator.wire.clock import Clock, Deadline, SystemClock
from tests.clocks import FakeClock

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


# ---- the clock ---------------------------------------------------------------------


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock(start=5.0, wall_start=1000.0)
    assert isinstance(clock, Clock) and isinstance(SystemClock(), Clock)
    assert (clock.monotonic(), clock.time()) == (5.0, 1000.0)
    clock.advance(2.5)
    clock.sleep(0.5)
    assert (clock.monotonic(), clock.time(), clock.slept) == (8.0, 1003.0, [0.5])
    clock.jump_to(7.0)  # never backwards
    assert clock.monotonic() == 8.0
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)


def test_deadline_arm_expire_remaining_disarm() -> None:
    clock = FakeClock()
    deadline = Deadline(clock)
    assert (deadline.expired(), deadline.remaining(), deadline.at) == (False, math.inf, None)
    deadline.arm(3.0)
    clock.advance(1.0)
    assert (deadline.expired(), deadline.remaining(), deadline.at) == (False, 2.0, 3.0)
    clock.advance(2.0)
    assert deadline.expired() and deadline.remaining() == 0.0
    deadline.disarm()
    assert not deadline.expired()
    with pytest.raises(ValueError):
        deadline.arm(-0.1)
    assert "unarmed" in repr(deadline)


def test_fake_clock_jumps_to_the_next_armed_deadline() -> None:
    clock = FakeClock()
    late, soon, unarmed = Deadline.after(clock, 9.0), Deadline.after(clock, 4.0), Deadline(clock)
    assert clock.jump_to_next_deadline() == 4.0 and soon.expired() and not late.expired()
    assert clock.jump_to_next_deadline() == 9.0 and late.expired()
    assert clock.jump_to_next_deadline() is None and clock.monotonic() == 9.0
    assert not unarmed.expired()


def test_system_clock_reads_real_time() -> None:
    clock = SystemClock()
    first = clock.monotonic()
    clock.sleep(0)
    assert clock.monotonic() >= first and clock.time() > 1_600_000_000
    assert not Deadline.after(clock, 60).expired()


# ---- table rows ----------------------------------------------------------------------

IGNORE = "ignore"
FORCED = at(ACTIVATING, final_offsets=None, source_declared_dead=True)  # release timed out
NO_SOURCE = at(ACTIVATING, source=None, final_offsets=None)


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


def test_phase_strings_are_pinned() -> None:
    assert [p.value for p in Phase] == [
        "planned", "catching_up", "releasing", "activating", "done", "cancelled"]


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


# ---- plan, resume, helpers, persistence ------------------------------------------------


def test_plan_starts_a_warmup() -> None:
    handoff, commands = plan(TASK, S, T, 7)
    assert handoff == Handoff(TASK, S, T, PLANNED, 7.0)
    assert commands == [Persist(handoff), StartWarmup(TASK, T)]


def test_plan_caught_up_target_releases_at_once() -> None:
    handoff, commands = plan(TASK, S, T, 7.0, caught_up=True, lag=3)
    assert (handoff.phase, handoff.lag) == (RELEASING, 3)
    assert commands == [Persist(handoff), SendRelease(TASK, S)]


def test_plan_without_source_activates_from_committed_offsets() -> None:
    handoff, commands = plan(TASK, None, T, 7.0)
    assert handoff.phase == ACTIVATING and not handoff.source_declared_dead
    assert commands == [Persist(handoff), SendActivate(TASK, T, None)]


@pytest.mark.parametrize("task,source,target", [(TASK, S, S), ("", S, T), (TASK, S, "")])
def test_plan_refuses_nonsense(task: str, source: str, target: str) -> None:
    with pytest.raises(LocalHandoffError):
        plan(task, source, target, 0.0)


def test_handoff_refuses_pre_release_phase_without_source() -> None:
    with pytest.raises(LocalHandoffError, match="needs a source"):
        at(CATCHING_UP, source=None)


@pytest.mark.parametrize("bad", [
    {"acceptable_lag": -1}, {"release_timeout_s": 0}, {"activate_timeout_s": -2.0},
    {"catch_up_timeout_s": 0.0}])
def test_config_refuses_nonsense(bad: dict[str, Any]) -> None:
    with pytest.raises(LocalHandoffError, match=next(iter(bad))):
        HandoffConfig(**bad)


@pytest.mark.parametrize("start,commands", [
    (at(PLANNED), [StartWarmup(TASK, T)]),
    (at(CATCHING_UP), [StartWarmup(TASK, T)]),
    (at(RELEASING), [SendRelease(TASK, S)]),
    (at(ACTIVATING), [SendActivate(TASK, T, OFFS)]),
    (FORCED, [DeclareDead(S), SendActivate(TASK, T, None)]),
    (NO_SOURCE, [SendActivate(TASK, T, None)]),
])
def test_resume_rearms_and_reissues(start: Handoff, commands: list[Command]) -> None:
    resumed, issued = resume(roundtrip(start), T0 + 500)
    assert resumed == replace(start, since=T0 + 500)
    assert issued == [Persist(resumed), *commands]


def test_resume_of_ended_handoffs() -> None:
    assert resume(at(DONE), 1.0) == (at(DONE), [])
    cancelled = at(CANCELLED)
    assert resume(cancelled, 1.0) == (cancelled, [StopWarmup(TASK, T), ResumeOwner(TASK, S)])
    orphan = at(CANCELLED, source_declared_dead=True)
    assert resume(orphan, 1.0) == (orphan, [])


def test_final_owner_and_next_deadline() -> None:
    with pytest.raises(LocalHandoffError, match="no final owner"):
        final_owner(at(RELEASING))
    assert [next_deadline(at(p), CFG) for p in Phase] == [
        T0 + 60, T0 + 60, T0 + 10, T0 + 30, None, None]
    assert next_deadline(at(PLANNED), replace(CFG, catch_up_timeout_s=None)) is None


def test_record_is_plain_json_and_tolerates_unknown_keys() -> None:
    handoff = at(ACTIVATING, reason="r", lag=3, source_declared_dead=True)
    record = json.loads(json.dumps(handoff.to_dict()))
    assert record["phase"] == "activating" and record["final_offsets"] == OFFS
    assert Handoff.from_dict({**record, "added_later": 1}) == handoff
    minimal = {k: record[k] for k in ("task", "source", "target", "phase", "since",
                                      "final_offsets")}
    assert Handoff.from_dict(minimal) == replace(handoff, reason="", lag=None,
                                                 source_declared_dead=False)


@pytest.mark.parametrize("key,value", [
    ("phase", "handing"), ("since", "soon"), ("since", True), ("lag", True), ("lag", 1.5),
    ("source", 3), ("final_offsets", {"events:0": "1"}), ("final_offsets", {"e": 1}),
    ("source_declared_dead", 1), ("target", None)])
def test_bad_record_names_the_field(key: str, value: Any) -> None:
    record = {**at(ACTIVATING).to_dict(), key: value}
    with pytest.raises(LocalHandoffError, match=f"field '{key}'"):
        Handoff.from_dict(record)


def test_missing_field_is_named() -> None:
    record = at(PLANNED).to_dict()
    del record["target"]
    with pytest.raises(LocalHandoffError, match="'target'.*missing"):
        Handoff.from_dict(record)


def test_release_ack_offsets_are_copied() -> None:
    offsets = dict(OFFS)
    new, commands = step(at(RELEASING), ReleaseAcked(offsets), CFG, T0)
    offsets["events:0"] = 0
    assert new.final_offsets == OFFS and commands[1] == SendActivate(TASK, T, OFFS)


# ---- random event sequences against an ownership model ---------------------------------


def expected_error(h: Handoff, event: Event) -> type[Exception] | None:
    """The spec of which (phase, event) pairs are rejected, written independently."""
    if isinstance(event, WarmupStarted | Activated) and event.processor_id not in (None, h.target):
        return RemoteHandoffError
    if isinstance(event, ReleaseAcked) and event.processor_id not in (None, h.source):
        return RemoteHandoffError
    if isinstance(event, Cancel) and h.phase in (ACTIVATING, DONE):
        return LocalHandoffError
    if isinstance(event, Activated) and h.phase not in (ACTIVATING, DONE):
        return RemoteHandoffError
    if isinstance(event, ReleaseAcked):
        valid = all(k.rpartition(":")[2].isdigit() and type(v) is int and v >= 0
                    for k, v in event.final_offsets.items())
        if h.phase in (PLANNED, CATCHING_UP) or (h.phase == RELEASING and not valid):
            return RemoteHandoffError
        if h.phase == ACTIVATING and (h.source is None or (
                not h.source_declared_dead and event.final_offsets != h.final_offsets)):
            return RemoteHandoffError
    return None


class Ownership:
    """Who may be writing the task's output, as the commands sent so far imply."""

    def __init__(self, source: str | None) -> None:
        self.source = source
        self.source_out = source is not None  # until it acknowledges a release, or dies
        self.target_out = False
        self.acked: dict[str, int] | None = None
        self.gone: set[str] = set()
        self.source_may_stop = False  # a release was sent and not yet undone by ResumeOwner

    def lose(self, processor: str) -> None:
        self.gone.add(processor)
        self.source_out &= processor != self.source
        self.target_out &= processor != T

    def run(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, DeclareDead):
                assert command.processor in (self.source, T)
                self.lose(command.processor)
            elif isinstance(command, SendActivate):
                # the safety invariant: the source acknowledged, or is dead / lost / absent
                assert command.processor == T and not self.source_out, command
                assert self.source is None or self.acked is not None or self.source in self.gone
                assert command.final_offsets == self.acked and T not in self.gone
                self.target_out = True
            elif isinstance(command, ResumeOwner):
                assert command.processor == self.source and self.source not in self.gone
                assert not self.target_out, "resuming the source while the target may write"
                self.source_out, self.source_may_stop = True, False
            elif isinstance(command, SendRelease):
                assert command.processor == self.source
                self.source_may_stop = True
            elif isinstance(command, StartWarmup | StopWarmup):
                assert command.processor == T
            assert not (self.source_out and self.target_out), "two owners writing"

    def check_end(self, handoff: Handoff) -> None:
        owner = final_owner(handoff)
        assert owner != self.source or not self.source_may_stop, "released source left stopped"
        assert (self.source_out, self.target_out) == (owner == self.source and owner is not None,
                                                      owner == T)


def check_persisted(before: Handoff | None, after: Handoff, commands: list[Command]) -> None:
    persists = [c for c in commands if isinstance(c, Persist)]
    changed = before is None or replace(after, lag=before.lag) != before
    if changed:
        assert commands[0] == Persist(after) and len(persists) == 1
    else:
        assert persists == []
    assert roundtrip(after) == after


# valid messages are listed several times, so that deep sequences are common
SENDERS = st.sampled_from([None, None, S, T, T, OTHER])
ACKS = st.sampled_from([OFFS, OFFS, OFFS, {"events:0": 43, "events:1": 7}, {}, {"events": 1},
                        {"events:0": -1}])
LOST = st.sampled_from([S, T, OTHER])


def LIVE(machine: HandoffMachine) -> bool:  # noqa: N802 (reads as a condition)
    return machine.handoff.phase not in TERMINAL_PHASES


class HandoffMachine(RuleBasedStateMachine):
    """Random events, ticks and coordinator restarts; invariants after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(start=1000.0)

    @initialize(source=st.sampled_from([S, None]), caught_up=st.booleans())
    def start(self, source: str | None, caught_up: bool) -> None:
        self.handoff, commands = plan(TASK, source, T, self.clock.monotonic(),
                                      caught_up=caught_up)
        check_persisted(None, self.handoff, commands)
        self.model = Ownership(source)
        self.model.run(commands)

    def feed(self, event: Event) -> None:
        before, now = self.handoff, self.clock.monotonic()
        expected = expected_error(before, event)
        try:
            after, commands = step(before, event, CFG, now)
        except (RemoteHandoffError, LocalHandoffError) as error:
            assert type(error) is expected, (before, event, error)
            return
        assert expected is None, (before, event)
        if before.phase in TERMINAL_PHASES:
            assert (after, commands) == (before, []), "terminal phases are terminal"
            return
        assert after.phase == CANCELLED or ORDER.index(after.phase) >= ORDER.index(before.phase)
        check_persisted(before, after, commands)
        if isinstance(event, ProcessorLost):
            self.model.lose(event.processor_id)
            # a lost participant is never forgotten
            if event.processor_id == before.source:
                assert after.source_declared_dead
            if event.processor_id == T:
                assert after.phase == CANCELLED
        if isinstance(event, ReleaseAcked) and before.phase == RELEASING:
            self.model.acked = dict(event.final_offsets)
            self.model.source_out = False
        self.model.run(commands)
        self.handoff = after
        if after.phase in TERMINAL_PHASES:
            self.model.check_end(after)

    @precondition(LIVE)
    @rule()
    def progress(self) -> None:
        """What a healthy system reports next, so that deep sequences are common."""
        healthy: dict[Phase, Event] = {
            PLANNED: WarmupStarted(), CATCHING_UP: LagReported(0),
            RELEASING: ReleaseAcked(OFFS), ACTIVATING: Activated()}
        self.feed(healthy[self.handoff.phase])

    @precondition(lambda self: self.handoff.phase in TERMINAL_PHASES)
    @rule(event=st.sampled_from([WarmupStarted(), LagReported(1), ReleaseAcked(OFFS),
                                 Activated(), ProcessorLost(S), ProcessorLost(T),
                                 Tick(1e9), Cancel("late")]))
    def after_the_end(self, event: Event) -> None:
        self.feed(event)

    @precondition(LIVE)
    @rule(sender=SENDERS)
    def warmup_started(self, sender: str | None) -> None:
        self.feed(WarmupStarted(sender))

    @precondition(LIVE)
    @rule(lag=st.integers(-5, 300))
    def lag_reported(self, lag: int) -> None:
        self.feed(LagReported(lag))

    @precondition(LIVE)
    @rule(offsets=ACKS, sender=SENDERS)
    def release_acked(self, offsets: dict[str, int], sender: str | None) -> None:
        self.feed(ReleaseAcked(offsets, sender))

    @precondition(LIVE)
    @rule(sender=SENDERS)
    def activated(self, sender: str | None) -> None:
        self.feed(Activated(sender))

    @precondition(LIVE)
    @rule(processor=LOST)
    def processor_lost(self, processor: str) -> None:
        self.feed(ProcessorLost(processor))

    @precondition(LIVE)
    @rule(seconds=st.sampled_from([0.0, 1.0, 9.99, 10.0, 29.0, 30.0, 61.0]))
    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.feed(Tick(self.clock.monotonic()))

    @rule()
    def tick_at_next_deadline(self) -> None:
        deadline = next_deadline(self.handoff, CFG)
        if deadline is not None:
            self.clock.jump_to(deadline)
            phase = self.handoff.phase
            self.feed(Tick(self.clock.monotonic()))
            assert self.handoff.phase != phase, "a due deadline must change the phase"

    @precondition(LIVE)
    @rule(reason=st.sampled_from(["operator", "assignor", "{odd}"]))
    def cancel(self, reason: str) -> None:
        self.feed(Cancel(reason))

    @rule()
    def restart_coordinator(self) -> None:
        persisted = roundtrip(self.handoff)
        assert persisted == self.handoff
        resumed, commands = resume(persisted, self.clock.monotonic())
        check_persisted(persisted, resumed, commands)
        self.model.run(commands)
        self.handoff = resumed

    @invariant()
    def owner_count(self) -> None:
        if hasattr(self, "model"):
            assert not (self.model.source_out and self.model.target_out)


TestHandoffMachine = HandoffMachine.TestCase
TestHandoffMachine.settings = settings(max_examples=600, stateful_step_count=20, deadline=None)


# ---- the pair harness -----------------------------------------------------------------

PART = "events:0"
VALUES = list(range(1, 31))
EXPECTED = [(i, sum(VALUES[: i + 1])) for i in range(len(VALUES))]  # one processor's output
PAIR_CFG = HandoffConfig(acceptable_lag=2, release_timeout_s=10.0, activate_timeout_s=30.0,
                         catch_up_timeout_s=60.0)


class FakeKafka:
    """One input partition, the group's committed offset, and the task's transactional id."""

    def __init__(self) -> None:
        self.committed = 0
        self.epoch = 0
        self.output: list[tuple[int, int, str]] = []  # (input offset, running sum, writer)

    def init_transactions(self) -> int:
        self.epoch += 1  # fences every earlier producer of the task
        return self.epoch

    def commit(self, epoch: int, outputs: list[tuple[int, int, str]], next_offset: int) -> bool:
        if epoch != self.epoch:
            return False
        self.output += outputs
        self.committed = next_offset
        return True


class FakeProcessor:
    """A processor running the running-sum job on the one task: roles, store, producer."""

    def __init__(self, pid: str, kafka: FakeKafka, active: bool = False) -> None:
        self.pid, self.kafka = pid, kafka
        self.applied, self.total, self.epoch = 0, 0, -1  # the store: T2 and the state
        self.role = "idle"
        self.inbox: deque[Command] = deque()
        self.outbox: deque[Event] = deque()
        if active:
            self.epoch, self.role = kafka.init_transactions(), "active"

    def replay(self, end: int) -> None:
        """Apply records up to `end` to the store, without output."""
        assert self.applied <= end, f"{self.pid}'s store is past {end}"
        self.total += sum(VALUES[self.applied:end])
        self.applied = end

    def warm(self, n: int) -> None:
        if self.role == "warmup":
            self.replay(min(self.applied + n, self.kafka.committed))

    def process(self, n: int) -> None:
        """One transaction of up to n records; a fenced producer stops the task."""
        if self.role != "active":
            return
        end, total, outputs = min(self.applied + n, len(VALUES)), self.total, []
        for offset in range(self.applied, end):
            total += VALUES[offset]
            outputs.append((offset, total, self.pid))
        if self.kafka.commit(self.epoch, outputs, end):
            self.applied, self.total = end, total
        else:
            self.role = "fenced"

    def receive(self) -> None:
        """One heartbeat reply: alive: false wins over everything else queued."""
        if self.role in ("crashed", "dead") or any(isinstance(c, DeclareDead) for c in self.inbox):
            self.inbox.clear()
            self.role = "crashed" if self.role == "crashed" else "dead"
            return
        while self.inbox:
            self.handle(self.inbox.popleft())

    def handle(self, command: Command) -> None:
        if isinstance(command, StartWarmup) and self.role in ("idle", "warmup"):
            self.role = "warmup"
            self.outbox.append(WarmupStarted(self.pid))
        elif isinstance(command, StopWarmup) and self.role == "warmup":
            self.role = "idle"
        elif isinstance(command, SendRelease) and self.role in ("active", "released"):
            self.role = "released"  # process() commits per call: nothing open to commit
            self.outbox.append(ReleaseAcked({PART: self.applied}, self.pid))
        elif isinstance(command, SendActivate) and self.role in ("idle", "warmup"):
            self.epoch = self.kafka.init_transactions()
            end = self.kafka.committed
            if command.final_offsets is not None:
                assert command.final_offsets[PART] == end, "source wrote after its release"
            self.replay(end)
            self.role = "active"
            self.outbox.append(Activated(self.pid))
        elif isinstance(command, SendActivate) and self.role == "active":
            self.outbox.append(Activated(self.pid))
        elif isinstance(command, ResumeOwner) and self.role in ("released", "fenced"):
            self.epoch = self.kafka.init_transactions()
            self.replay(self.kafka.committed)
            self.role = "active"

    def crash(self) -> None:
        self.role = "crashed"
        self.inbox.clear()
        self.outbox.clear()


class Core:
    """The coordinator's handoff driver: feeds events to step() and executes commands."""

    def __init__(self, clock: FakeClock, procs: dict[str, FakeProcessor]) -> None:
        self.clock, self.procs = clock, procs
        self.handoff: Handoff | None = None
        self.stream: list[str] = []  # the coordinator stream
        self.errors: list[Exception] = []
        self.declared: set[str] = set()  # executions invalidated (liveness state)

    def execute(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, Persist):
                self.stream.append(json.dumps(command.handoff.to_dict()))
                continue
            if isinstance(command, DeclareDead):
                self.declared.add(command.processor)
            if isinstance(command, SendActivate | ResumeOwner):  # one writer at a time
                writers = [pid for pid, proc in self.procs.items() if proc.role == "active"
                           and pid != command.processor and pid not in self.declared]
                assert not writers, f"{command} while {writers} may still write"
            self.procs[command.processor].inbox.append(command)

    def plan(self, source: str | None, target: str) -> None:
        self.handoff, commands = plan(TASK, source, target, self.clock.monotonic())
        self.execute(commands)

    def feed(self, event: Event) -> None:
        assert self.handoff is not None
        try:
            self.handoff, commands = step(self.handoff, event, PAIR_CFG, self.clock.monotonic())
        except (RemoteHandoffError, LocalHandoffError) as error:
            self.errors.append(error)  # logged and dropped; the handoff is unchanged
            return
        self.execute(commands)

    def collect(self, pid: str) -> None:
        outbox = self.procs[pid].outbox
        while outbox:
            self.feed(outbox.popleft())

    def report_lag(self) -> None:
        target = self.procs[self.handoff.target] if self.handoff else None
        if target is not None and target.role == "warmup":
            self.feed(LagReported(target.kafka.committed - target.applied))

    def lose(self, pid: str) -> None:
        """The liveness layer gives up on `pid`: its heartbeat answers alive: false."""
        self.procs[pid].inbox.append(DeclareDead(pid))
        self.declared.add(pid)
        if self.handoff is not None:
            self.feed(ProcessorLost(pid))

    def timeout(self) -> None:
        deadline = next_deadline(self.handoff, PAIR_CFG) if self.handoff else None
        if deadline is not None:
            self.clock.jump_to(deadline)
            self.feed(Tick(self.clock.monotonic()))

    def restart(self) -> Core:
        """A new coordinator process: reads the stream, resumes; replies in flight are lost."""
        fresh = Core(self.clock, self.procs)
        fresh.stream, fresh.declared = self.stream, self.declared
        for proc in self.procs.values():
            proc.outbox.clear()
        fresh.handoff, commands = resume(Handoff.from_dict(json.loads(self.stream[-1])),
                                         self.clock.monotonic())
        fresh.execute(commands)
        return fresh


class Pair:
    """Coordinator core + p1 (the owner) + p2, stepped by a script: one action per line.

    Actions: `plan`, `pN recv` (heartbeat reply to pN), `pN send` (pN's reports reach the
    coordinator), `pN process K`, `p2 warm K`, `lag`, `wait S`, `timeout`, `pN crash`,
    `lose pN`, `cancel`, `restart`.
    """

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.kafka = FakeKafka()
        self.procs = {S: FakeProcessor(S, self.kafka, active=True),
                      T: FakeProcessor(T, self.kafka),
                      OTHER: FakeProcessor(OTHER, self.kafka)}
        self.core = Core(self.clock, self.procs)

    def run(self, script: str) -> Pair:
        for line in filter(None, (raw.split("#")[0].strip() for raw in script.splitlines())):
            self.act(*line.split())
        return self

    def act(self, verb: str, *args: str) -> None:
        core = self.core
        if verb == "plan":
            core.plan(S, T)
        elif verb in self.procs:
            proc, what = self.procs[verb], args[0]
            if what == "recv":
                proc.receive()
            elif what == "send":
                core.collect(verb)
            elif what == "process":
                proc.process(int(args[1]))
            elif what == "warm":
                proc.warm(int(args[1]))
            else:
                assert what == "crash", what
                proc.crash()
        elif verb == "lag":
            core.report_lag()
        elif verb == "wait":
            self.clock.advance(float(args[0]))
            core.feed(Tick(self.clock.monotonic()))
        elif verb == "timeout":
            core.timeout()
        elif verb == "lose":
            core.lose(args[0])
        elif verb == "cancel":
            core.feed(Cancel("operator"))
        else:
            assert verb == "restart", verb
            self.core = core.restart()

    @property
    def phases(self) -> list[str]:
        return [json.loads(record)["phase"] for record in self.core.stream]

    def writers(self) -> str:
        """Who wrote each output, run-length encoded: 'p1*18 p2*12'."""
        runs: list[list[Any]] = []
        for _, _, writer in self.kafka.output:
            if runs and runs[-1][0] == writer:
                runs[-1][1] += 1
            else:
                runs.append([writer, 1])
        return " ".join(f"{w}*{n}" for w, n in runs)

    def assert_exactly_once(self) -> None:
        assert [(o, v) for o, v, _ in self.kafka.output] == EXPECTED


def test_pair_successful_handoff_survives_a_coordinator_restart() -> None:
    pair = Pair().run("""
        p1 process 10
        plan
        p2 recv        # StartWarmup
        p2 send        # WarmupStarted: catching_up
        p2 warm 4
        lag            # 6 behind: keep catching up
        p1 process 5
        p2 warm 10
        lag            # 1 behind: releasing, SendRelease queued for p1
        p1 process 3   # p1 has not heard yet and keeps going
        wait 3
        restart        # resumes releasing: re-arms its timer, sends the release again
        p1 recv        # both releases: two identical acknowledgements
        p1 send        # activating with final T1 = 18; the duplicate is ignored
        p1 process 5   # released: no output
        p2 recv        # fence, replay 14 -> 18 without output, active
        p2 process 4
        p2 send        # Activated: done
        p2 process 100
    """)
    pair.assert_exactly_once()
    assert pair.writers() == "p1*18 p2*12"
    assert pair.phases == ["planned", "catching_up", "releasing", "releasing", "activating",
                           "done"]
    handoff = pair.core.handoff
    assert handoff is not None and handoff.final_offsets == {PART: 18}
    assert final_owner(handoff) == T and pair.core.errors == []
    assert (pair.procs[S].role, pair.procs[T].role) == ("released", "active")


def test_pair_release_timeout_fences_the_silent_owner() -> None:
    pair = Pair().run("""
        p1 process 10
        plan
        p2 recv
        p2 send
        p2 warm 10
        lag            # caught up: SendRelease to p1, which never hears it
        p1 process 4   # the cut-off owner keeps writing: committed 14
        wait 9.9       # not yet
        timeout        # release timeout: DeclareDead(p1), SendActivate(p2, None)
        p1 process 2   # still before p2 fences it: a legitimate commit, 16
        p2 recv        # init_transactions fences p1; replay to the committed 16
        p1 process 3   # fenced: rejected, p1 stops the task
        p2 send        # done
        p1 recv        # alive: false
        p2 process 100
    """)
    pair.assert_exactly_once()
    assert pair.writers() == "p1*16 p2*14"
    handoff = pair.core.handoff
    assert handoff is not None and handoff.phase == DONE and handoff.source_declared_dead
    assert "p1 did not acknowledge the release within 10.0 s" in handoff.reason
    assert (pair.procs[S].role, pair.procs[T].role) == ("dead", "active")


@pytest.mark.parametrize("how", ["lose p2", "timeout"])
def test_pair_target_crash_mid_activation_returns_the_task(how: str) -> None:
    pair = Pair().run(f"""
        p1 process 10
        plan
        p2 recv
        p2 send
        p2 warm 10
        lag
        p1 recv        # release: final T1 = 10
        p1 send        # activating
        p2 recv        # fenced, replayed, active; Activated queued
        p2 process 3   # commits 3 outputs, then never reports
        {how}          # lost, or the activation timeout: DeclareDead(p2), ResumeOwner(p1)
        p2 process 2   # a zombie p2 still writes before p1 resumes
        p1 recv        # p1 fences p2, replays 10 -> 15 without output, active
        p2 process 2   # fenced
        p1 process 100
    """)
    pair.assert_exactly_once()
    assert pair.writers() == "p1*10 p2*5 p1*15"
    handoff = pair.core.handoff
    assert handoff is not None and handoff.phase == CANCELLED and final_owner(handoff) == S
    assert pair.phases[-1] == "cancelled" and pair.procs[T].role == "fenced"


# One turn of a healthy system; the random schedule skips steps and injects faults.
PROGRESS = ["p1 process", "p2 recv", "p2 send", "p2 warm", "lag", "p1 recv", "p1 send"]
FAULTS = ["p1 process", "p2 process", "p1 recv", "p2 recv", "p1 send", "p2 send", "wait",
          "timeout", "p1 crash", "p2 crash", "lose p1", "lose p2", "cancel", "restart"]


def heal(pair: Pair) -> None:
    """No more faults: deliver, report, and let timeouts fire until the handoff ends."""
    for _ in range(40):
        before = (pair.core.handoff, len(pair.core.stream))
        for pid in (S, T, OTHER):
            pair.procs[pid].receive()
            pair.core.collect(pid)
        pair.procs[T].warm(len(VALUES))
        pair.core.report_lag()
        handoff = pair.core.handoff
        assert handoff is not None
        if handoff.phase in TERMINAL_PHASES and not any(p.inbox for p in pair.procs.values()):
            return
        if (handoff, len(pair.core.stream)) == before:
            pair.core.timeout()
    raise AssertionError(f"no progress: {pair.core.handoff}")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.integers(0, 8), schedule=st.lists(st.tuples(
    st.booleans(), st.one_of(st.none(), st.none(), st.sampled_from(FAULTS)), st.integers(1, 8)),
    max_size=40))
def test_pair_random_interleavings_keep_exactly_once(
        first: int, schedule: list[tuple[bool, str | None, int]]) -> None:
    pair = Pair()
    pair.act("p1", "process", str(first))
    pair.act("plan")
    turn = 0
    for progress, fault, n in schedule:
        actions = [PROGRESS[turn % len(PROGRESS)]] if progress else []
        turn += progress
        for action in actions + ([fault] if fault else []):
            verb, *rest = action.split()
            if rest in (["process"], ["warm"]):
                pair.act(verb, rest[0], str(n))
            elif verb == "wait":
                pair.act("wait", str(n * 2))
            else:
                pair.act(verb, *rest)
    heal(pair)
    handoff = pair.core.handoff
    assert handoff is not None
    owner = final_owner(handoff)
    if owner is None or pair.procs[owner].role != "active":
        # nobody left (or the owner crashed): the assignor places the task on p3
        assert owner is None or pair.procs[owner].role in ("crashed", "dead"), pair.procs[owner]
        pair.core.plan(None, OTHER)
        heal(pair)
        assert pair.core.handoff is not None and pair.core.handoff.phase == DONE
        owner = OTHER
    pair.procs[owner].process(len(VALUES))
    pair.assert_exactly_once()


def test_metrics_phase_vocabulary_is_the_machine_s() -> None:
    """One source of truth: the in-flight phases the metrics label are the machine's."""
    from metrics import HANDOFF_PHASES
    from orchestrator.core.handoff import TERMINAL_PHASES, Phase

    assert tuple(p.value for p in Phase if p not in TERMINAL_PHASES) == HANDOFF_PHASES
