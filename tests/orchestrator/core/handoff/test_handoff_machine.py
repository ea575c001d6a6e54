"""The machine (orchestrator/core/handoff/machine.py): plan, resume, final owner and
deadlines, and random event sequences against an ownership model."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from orchestrator.core.handoff import (
    TERMINAL_PHASES,
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
from tests.clocks import FakeClock
from tests.orchestrator.core.handoff.handoff_support import (
    ACTIVATING,
    CANCELLED,
    CATCHING_UP,
    CFG,
    DONE,
    FORCED,
    NO_SOURCE,
    OFFS,
    ORDER,
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
