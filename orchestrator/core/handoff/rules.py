"""The handoff table's rules: what one (phase, event) pair does to a handoff (pure).

Each rule takes a `Step` (the handoff, the event, the config, the time) and returns
the next handoff and its commands; `orchestrator/core/handoff/table.py` names the rule
of every pair, `orchestrator/core/handoff/machine.py` applies them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeAlias, TypeVar

from orchestrator.core.handoff.codec import check_offsets
from orchestrator.core.handoff.errors import LocalHandoffError, RemoteHandoffError
from orchestrator.core.handoff.events import (
    Activated,
    Cancel,
    Command,
    DeclareDead,
    Event,
    Handoff,
    HandoffConfig,
    LagReported,
    Phase,
    ProcessorLost,
    ReleaseAcked,
    ReplicaFailed,
    ResumeOwner,
    SendActivate,
    SendRelease,
    StopWarmup,
    Tick,
    WarmupStarted,
)
from orchestrator.wire.catchup import is_caught_up

__all__ = [
    "Outcome", "Rule", "Step", "abandon_target", "activate_after_release",
    "activate_without_release", "cancel", "check_sender", "duplicate_release", "go",
    "ignore", "local", "note_lag", "note_source_gone", "on_loss", "on_timeout",
    "release_if_caught_up", "remote",
]


_E = TypeVar("_E")


Outcome: TypeAlias = tuple[Handoff, list[Command]]


@dataclass(frozen=True)
class Step:
    """One event arriving at one handoff, with the config and the time."""

    handoff: Handoff
    event: Event
    config: HandoffConfig
    now: float


Rule: TypeAlias = Callable[[Step], Outcome]


def _expect(event: Event, cls: type[_E]) -> _E:
    if not isinstance(event, cls):  # only a wiring mistake in TRANSITIONS gets here
        raise LocalHandoffError(f"rule for {cls.__name__} got {event!r}")
    return event


def ignore(s: Step) -> Outcome:
    """Stale or duplicate news that changes nothing."""
    return s.handoff, []


def note_lag(s: Step) -> Outcome:
    return replace(s.handoff, lag=_expect(s.event, LagReported).lag), []


def go(phase: Phase) -> Rule:
    return lambda s: (replace(s.handoff, phase=phase), [])


def release_if_caught_up(s: Step) -> Outcome:
    handoff, _ = note_lag(s)
    if is_caught_up(handoff.lag, s.config.acceptable_lag):
        assert handoff.source is not None
        return (replace(handoff, phase=Phase.RELEASING),
                [SendRelease(handoff.task, handoff.source)])
    return handoff, []


def activate_after_release(s: Step) -> Outcome:
    """The source stopped and told us where: the target continues from there."""
    h, offsets = s.handoff, _expect(s.event, ReleaseAcked).final_offsets
    check_offsets(offsets, lambda why: _remote_error(
        s, f"acknowledged the release with bad final offsets ({why})",
        "the processor runs an incompatible Baton version; upgrade it"))
    return (replace(h, phase=Phase.ACTIVATING, final_offsets=dict(offsets)),
            [SendActivate(h.task, h.target, dict(offsets))])


def activate_without_release(why: str) -> Rule:
    """The source is gone: make sure it stays gone, then activate from committed offsets."""
    def rule(s: Step) -> Outcome:
        h = s.handoff
        assert h.source is not None
        return (replace(h, phase=Phase.ACTIVATING, final_offsets=None,
                        source_declared_dead=True, reason=_say(why, s)),
                [DeclareDead(h.source), SendActivate(h.task, h.target, None)])
    return rule


def cancel(why: str) -> Rule:
    """Before activation: the target drops its warmup; a released source resumes."""
    def rule(s: Step) -> Outcome:
        h = s.handoff
        commands: list[Command] = [StopWarmup(h.task, h.target)]
        if h.phase == Phase.RELEASING:
            assert h.source is not None
            commands.append(ResumeOwner(h.task, h.source))
        return replace(h, phase=Phase.CANCELLED, reason=_say(why, s)), commands
    return rule


def abandon_target(why: str, *, declare_dead: bool = True) -> Rule:
    """During activation: stop the target for good (declared dead, unless it only
    failed the task and so holds nothing of it); the source resumes if it can."""
    def rule(s: Step) -> Outcome:
        h = s.handoff
        commands: list[Command] = [DeclareDead(h.target)] if declare_dead else []
        reason = _say(why, s)
        if h.source is not None and not h.source_declared_dead:
            commands.append(ResumeOwner(h.task, h.source))
        else:
            reason += "; no owner left: the assignor must place the task again"
        return replace(h, phase=Phase.CANCELLED, reason=reason), commands
    return rule


def note_source_gone(s: Step) -> Outcome:
    """The source already released; remember it cannot take the task back."""
    return replace(s.handoff, source_declared_dead=True), []


def duplicate_release(s: Step) -> Outcome:
    h, offsets = s.handoff, _expect(s.event, ReleaseAcked).final_offsets
    if h.source is None:
        raise _remote_error(s, "acknowledged a release that was never sent",
                            "check which processor reports this task")
    if h.source_declared_dead or offsets == h.final_offsets:
        return ignore(s)  # a repeat, or a late ack from an owner we already fenced
    raise _remote_error(
        s, f"acknowledged the release again with different final offsets {offsets} "
        f"(first: {h.final_offsets}); it kept processing after releasing",
        "stop that processor and run `baton audit` on the output")


def on_loss(*, source: Rule, target: Rule) -> Rule:
    """Dispatch ProcessorLost by role; an unrelated processor does not matter here."""
    def rule(s: Step) -> Outcome:
        lost = _expect(s.event, ProcessorLost).processor_id
        if lost == s.handoff.target:
            return target(s)
        if lost == s.handoff.source:
            return source(s)
        return ignore(s)
    return rule


def on_timeout(timeout: Callable[[HandoffConfig], float | None], then: Rule) -> Rule:
    """Apply `then` once the phase has lasted `timeout` seconds."""
    def rule(s: Step) -> Outcome:
        limit = timeout(s.config)
        elapsed = _expect(s.event, Tick).now - s.handoff.since
        return ignore(s) if limit is None or elapsed < limit else then(s)
    return rule


def remote(why: str, action: str) -> Rule:
    def rule(s: Step) -> Outcome:
        raise _remote_error(s, why, action)
    return rule


def local(why: str) -> Rule:
    def rule(s: Step) -> Outcome:
        h = s.handoff
        raise LocalHandoffError(
            f"task {h.task!r} handoff {h.source}->{h.target} is {h.phase}: {_say(why, s)}")
    return rule






def _say(template: str, s: Step) -> str:
    h, c, event = s.handoff, s.config, s.event
    return template.format(
        task=h.task, source=h.source, target=h.target, phase=h.phase, lag=h.lag,
        acceptable_lag=c.acceptable_lag, release_timeout_s=c.release_timeout_s,
        activate_timeout_s=c.activate_timeout_s,
        elapsed=(event.now - h.since) if isinstance(event, Tick) else 0.0,
        cancel=event.reason if isinstance(event, Cancel) else "",
        error=event.error if isinstance(event, ReplicaFailed) else "")


def _sender(handoff: Handoff, event: Event) -> str | None:
    if isinstance(event, ReleaseAcked):
        return event.processor_id or handoff.source
    if isinstance(event, WarmupStarted | Activated | ReplicaFailed):
        return event.processor_id or handoff.target
    return None


def check_sender(handoff: Handoff, event: Event) -> None:
    """A report from the wrong processor is a protocol violation in every phase."""
    expected = handoff.source if isinstance(event, ReleaseAcked) else handoff.target
    sender = _sender(handoff, event)
    if sender is not None and sender != expected:
        raise RemoteHandoffError(
            f"task {handoff.task!r} handoff {handoff.source}->{handoff.target} is "
            f"{handoff.phase}: {type(event).__name__} came from {sender}, expected "
            f"{expected}. Likely cause: a stale message from an earlier move of this task. "
            "Next: ignore it if that processor no longer holds the task, else stop it",
            processor=sender)


def _remote_error(s: Step, why: str, action: str) -> RemoteHandoffError:
    h, sender = s.handoff, _sender(s.handoff, s.event)
    return RemoteHandoffError(
        f"task {h.task!r} handoff {h.source}->{h.target} is {h.phase}: {sender} {why}. "
        f"Next: {action}", processor=sender)
