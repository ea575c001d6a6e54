r"""The handoff state machine: one task moving from an old owner to a new one (sans-IO).

Rules and theory of operation
=============================

A *handoff* moves one task from `source` (the processor running it as active, or
None when the task has no live owner) to `target`. The coordinator keeps one
`Handoff` value per moving task and feeds it *events* (what processors reported,
what the clock says, what the operator or the assignor decided) through `step()`,
which returns the next value and the *commands* the driver must execute. This
module does no I/O and never reads a clock: the driver passes `now`, talks to Kafka
and to processors, and turns what it hears back into events (after h11).

Phases (persisted as these strings, pinned in DESIGN.md)::

    planned -> catching_up -> releasing -> activating -> done
        \___________\______________\____________\___> cancelled

- planned      StartWarmup(target) was sent; waiting for the target to replay.
- catching_up  the target replays S2; we wait for lag <= acceptable_lag.
- releasing    SendRelease(source) was sent; the source stops fetching, commits,
               and acknowledges with its final T1 (ReleaseAcked).
- activating   SendActivate(target) was sent; the target fences the task's
               transactional id (init_transactions), replays T2 -> T1 without
               output, then processes; it reports Activated.
- done / cancelled   terminal: every later event is ignored or rejected.

Rules, in order of importance:

1. At most one active owner outputs at a time. The target is told to activate only
   after the source acknowledged release (final offsets known), or after the source
   was lost or declared dead (DeclareDead is emitted with the activation; the
   target's init_transactions fences the dead owner's producer, and the target
   starts from the group's committed offsets: `final_offsets=None`). A handoff
   without a source activates at once.
2. A handoff ends with exactly one owner: `final_owner()` is the target after
   `done`; the source after `cancelled`, unless the source is gone, in which case
   nobody owns the task and the assignor must place it again. Whenever the source
   may have stopped (release sent), cancelling also sends ResumeOwner(source); when
   the target may already be active (activating), abandoning it also declares it
   dead, so the resumed source's init_transactions is never racing a live target.
3. Write-ahead: every change of the persisted state emits `Persist(new)` as the
   *first* command. Drivers execute commands in order and stop on a failed Persist,
   so the coordinator stream never lags a command already sent. The last known
   `lag` alone is advisory and is not persisted on its own (it would write to the
   coordinator stream on every heartbeat); it rides along with the next Persist.
4. Restart: a restarted coordinator reads the last persisted `Handoff` of each task
   and calls `resume()`, which re-arms the phase timer (processors could not reach a
   dead coordinator, so they get a full timeout again) and re-issues the phase's
   commands. Processors must treat every command as idempotent.
5. Timeouts are checked on `Tick` against `since`, the time the phase was entered.
   Any clock works (the driver passes `clock.monotonic()`), because `resume()`
   re-arms `since` in the new process. `next_deadline()` says when to tick.
6. A target that reports the task failed (ReplicaFailed) ends the move: cancelled
   before activation, abandoned (not declared dead: only the task failed) during it.
7. Policy for events that make no sense in a phase is in the table, never implicit:
   stale or duplicate reports are ignored where that is safe (no state change, no
   commands); a peer's protocol violation raises `RemoteHandoffError` (the driver
   logs it and drops the message; the handoff is unchanged); the coordinator's own
   misuse raises `LocalHandoffError`. A message naming the wrong processor (e.g.
   `Activated` from anyone but the target) is always a `RemoteHandoffError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final, TypeAlias, TypeVar

from orchestrator.core.handoff.codec import _check_offsets
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
from orchestrator.wire.catchup import is_caught_up

__all__ = ["TRANSITIONS", "final_owner", "next_deadline", "plan", "resume", "step"]


def plan(task: str, source: str | None, target: str, now: float, *,
         caught_up: bool = False, lag: int | None = None) -> tuple[Handoff, list[Command]]:
    """Start moving `task` from `source` to `target`.

    Args:
        task: the task to move.
        source: its current active owner, or None when it has none (activate at once).
        target: the new owner.
        now: the driver's clock reading.
        caught_up: the target already holds a caught-up replica: release at once.
        lag: the target's last known lag, for status output.

    Returns:
        The new handoff and its commands: Persist first, then StartWarmup(target),
        SendRelease(source) when caught up, or SendActivate(target) without a source.

    Raises:
        LocalHandoffError: source == target, or an empty task or target name.
    """
    now = float(now)
    if source is None:
        handoff = Handoff(task, None, target, Phase.ACTIVATING, now, lag=lag,
                          reason="no live owner: activating from the committed offsets")
        commands: list[Command] = [SendActivate(task, target, None)]
    elif caught_up:
        handoff = Handoff(task, source, target, Phase.RELEASING, now, lag=lag)
        commands = [SendRelease(task, source)]
    else:
        handoff = Handoff(task, source, target, Phase.PLANNED, now, lag=lag)
        commands = [StartWarmup(task, target)]
    return handoff, [Persist(handoff), *commands]


def step(handoff: Handoff, event: Event, config: HandoffConfig,
         now: float) -> tuple[Handoff, list[Command]]:
    """Apply one event, following `TRANSITIONS`.

    Args:
        handoff: the current state.
        event: what happened.
        config: thresholds and timeouts.
        now: the driver's clock reading; stamps `since` when the phase changes.

    Returns:
        The next state and the commands to execute in order (Persist first whenever
        the persisted state changed; an ignored event returns the same state and []).

    Raises:
        RemoteHandoffError: a processor's message breaks the protocol in this phase.
        LocalHandoffError: the coordinator asked for something this phase forbids.
    """
    rule = TRANSITIONS.get((handoff.phase, type(event)))
    if rule is None:
        raise LocalHandoffError(f"{event!r} is not a handoff event (task {handoff.task!r})")
    _check_sender(handoff, event)
    new, commands = rule(_Step(handoff, event, config, now))
    if new.phase != handoff.phase:
        new = replace(new, since=float(now))
    if replace(new, lag=handoff.lag) == handoff:
        return new, commands
    return new, [Persist(new), *commands]


def resume(handoff: Handoff, now: float) -> tuple[Handoff, list[Command]]:
    """Pick up a persisted handoff after a coordinator restart.

    Call it only for the latest handoff of each task. It re-arms the phase timer
    and re-issues the commands the previous coordinator may not have executed.

    Returns:
        The re-armed handoff and its commands (Persist first when it changed).
    """
    task, source, target = handoff.task, handoff.source, handoff.target
    if handoff.phase == Phase.DONE:
        return handoff, []
    if handoff.phase == Phase.CANCELLED:
        owner = final_owner(handoff)
        return handoff, [] if owner is None else [StopWarmup(task, target),
                                                  ResumeOwner(task, owner)]
    commands: list[Command]
    if handoff.phase in (Phase.PLANNED, Phase.CATCHING_UP):
        commands = [StartWarmup(task, target)]
    elif handoff.phase == Phase.RELEASING:
        assert source is not None  # Handoff.__post_init__ guarantees it
        commands = [SendRelease(task, source)]
    else:
        commands = [SendActivate(task, target, handoff.final_offsets)]
        if source is not None and handoff.source_declared_dead:
            commands.insert(0, DeclareDead(source))
    rearmed = replace(handoff, since=float(now))
    return rearmed, [Persist(rearmed), *commands] if rearmed != handoff else commands


def final_owner(handoff: Handoff) -> str | None:
    """Who owns the task now that the handoff ended (None: nobody, re-place it).

    Raises:
        LocalHandoffError: the handoff has not ended.
    """
    if handoff.phase == Phase.DONE:
        return handoff.target
    if handoff.phase == Phase.CANCELLED:
        return None if handoff.source_declared_dead else handoff.source
    raise LocalHandoffError(
        f"task {handoff.task!r}: handoff {handoff.source}->{handoff.target} is still "
        f"{handoff.phase}; it has no final owner yet")


def next_deadline(handoff: Handoff, config: HandoffConfig) -> float | None:
    """When a Tick would next change this handoff (None: no timeout applies)."""
    timeout = {
        Phase.PLANNED: config.catch_up_timeout_s,
        Phase.CATCHING_UP: config.catch_up_timeout_s,
        Phase.RELEASING: config.release_timeout_s,
        Phase.ACTIVATING: config.activate_timeout_s,
    }.get(handoff.phase)
    return None if timeout is None else handoff.since + timeout


_E = TypeVar("_E")


_Outcome: TypeAlias = tuple[Handoff, list[Command]]


@dataclass(frozen=True)
class _Step:
    handoff: Handoff
    event: Event
    config: HandoffConfig
    now: float


_Rule: TypeAlias = Callable[[_Step], _Outcome]


def _expect(event: Event, cls: type[_E]) -> _E:
    if not isinstance(event, cls):  # only a wiring mistake in TRANSITIONS gets here
        raise LocalHandoffError(f"rule for {cls.__name__} got {event!r}")
    return event


def _ignore(s: _Step) -> _Outcome:
    """Stale or duplicate news that changes nothing."""
    return s.handoff, []


def _note_lag(s: _Step) -> _Outcome:
    return replace(s.handoff, lag=_expect(s.event, LagReported).lag), []


def _go(phase: Phase) -> _Rule:
    return lambda s: (replace(s.handoff, phase=phase), [])


def _release_if_caught_up(s: _Step) -> _Outcome:
    handoff, _ = _note_lag(s)
    if is_caught_up(handoff.lag, s.config.acceptable_lag):
        assert handoff.source is not None
        return (replace(handoff, phase=Phase.RELEASING),
                [SendRelease(handoff.task, handoff.source)])
    return handoff, []


def _activate_after_release(s: _Step) -> _Outcome:
    """The source stopped and told us where: the target continues from there."""
    h, offsets = s.handoff, _expect(s.event, ReleaseAcked).final_offsets
    _check_offsets(offsets, lambda why: _remote_error(
        s, f"acknowledged the release with bad final offsets ({why})",
        "the processor runs an incompatible Baton version; upgrade it"))
    return (replace(h, phase=Phase.ACTIVATING, final_offsets=dict(offsets)),
            [SendActivate(h.task, h.target, dict(offsets))])


def _activate_without_release(why: str) -> _Rule:
    """The source is gone: make sure it stays gone, then activate from committed offsets."""
    def rule(s: _Step) -> _Outcome:
        h = s.handoff
        assert h.source is not None
        return (replace(h, phase=Phase.ACTIVATING, final_offsets=None,
                        source_declared_dead=True, reason=_say(why, s)),
                [DeclareDead(h.source), SendActivate(h.task, h.target, None)])
    return rule


def _cancel(why: str) -> _Rule:
    """Before activation: the target drops its warmup; a released source resumes."""
    def rule(s: _Step) -> _Outcome:
        h = s.handoff
        commands: list[Command] = [StopWarmup(h.task, h.target)]
        if h.phase == Phase.RELEASING:
            assert h.source is not None
            commands.append(ResumeOwner(h.task, h.source))
        return replace(h, phase=Phase.CANCELLED, reason=_say(why, s)), commands
    return rule


def _abandon_target(why: str, *, declare_dead: bool = True) -> _Rule:
    """During activation: stop the target for good (declared dead, unless it only
    failed the task and so holds nothing of it); the source resumes if it can."""
    def rule(s: _Step) -> _Outcome:
        h = s.handoff
        commands: list[Command] = [DeclareDead(h.target)] if declare_dead else []
        reason = _say(why, s)
        if h.source is not None and not h.source_declared_dead:
            commands.append(ResumeOwner(h.task, h.source))
        else:
            reason += "; no owner left: the assignor must place the task again"
        return replace(h, phase=Phase.CANCELLED, reason=reason), commands
    return rule


def _note_source_gone(s: _Step) -> _Outcome:
    """The source already released; remember it cannot take the task back."""
    return replace(s.handoff, source_declared_dead=True), []


def _duplicate_release(s: _Step) -> _Outcome:
    h, offsets = s.handoff, _expect(s.event, ReleaseAcked).final_offsets
    if h.source is None:
        raise _remote_error(s, "acknowledged a release that was never sent",
                            "check which processor reports this task")
    if h.source_declared_dead or offsets == h.final_offsets:
        return _ignore(s)  # a repeat, or a late ack from an owner we already fenced
    raise _remote_error(
        s, f"acknowledged the release again with different final offsets {offsets} "
        f"(first: {h.final_offsets}); it kept processing after releasing",
        "stop that processor and run `baton audit` on the output")


def _on_loss(*, source: _Rule, target: _Rule) -> _Rule:
    """Dispatch ProcessorLost by role; an unrelated processor does not matter here."""
    def rule(s: _Step) -> _Outcome:
        lost = _expect(s.event, ProcessorLost).processor_id
        if lost == s.handoff.target:
            return target(s)
        if lost == s.handoff.source:
            return source(s)
        return _ignore(s)
    return rule


def _on_timeout(timeout: Callable[[HandoffConfig], float | None], then: _Rule) -> _Rule:
    """Apply `then` once the phase has lasted `timeout` seconds."""
    def rule(s: _Step) -> _Outcome:
        limit = timeout(s.config)
        elapsed = _expect(s.event, Tick).now - s.handoff.since
        return _ignore(s) if limit is None or elapsed < limit else then(s)
    return rule


def _remote(why: str, action: str) -> _Rule:
    def rule(s: _Step) -> _Outcome:
        raise _remote_error(s, why, action)
    return rule


def _local(why: str) -> _Rule:
    def rule(s: _Step) -> _Outcome:
        h = s.handoff
        raise LocalHandoffError(
            f"task {h.task!r} handoff {h.source}->{h.target} is {h.phase}: {_say(why, s)}")
    return rule


_CATCH_UP: Final = _on_timeout(
    lambda c: c.catch_up_timeout_s,
    _cancel("catch-up timeout: {target} still lags {lag} records (acceptable "
            "{acceptable_lag}) after {elapsed:.1f} s"))


_UNSOLICITED_ACTIVATION: Final = _remote(
    "reports the task active but was never told to activate it",
    "two processors may now write the task's output: stop that processor")
_TARGET_FAILED: Final = "target {target} failed the task: {error}"
_FORCED: Final = "{source} {cause}: declared dead; {target} activates from committed offsets"
P = Phase


TRANSITIONS: Final[Mapping[tuple[Phase, type[Event]], _Rule]] = MappingProxyType({
    # planned: StartWarmup(target) sent.
    (P.PLANNED, WarmupStarted): _go(P.CATCHING_UP),
    (P.PLANNED, LagReported): _note_lag,
    (P.PLANNED, ReleaseAcked): _remote("acknowledged a release that was never sent",
                                       "check which processor reports this task"),
    (P.PLANNED, Activated): _UNSOLICITED_ACTIVATION,
    (P.PLANNED, ProcessorLost): _on_loss(
        source=_activate_without_release(_FORCED.replace("{cause}", "was lost")),
        target=_cancel("target {target} was lost before catching up")),
    (P.PLANNED, Tick): _CATCH_UP,
    (P.PLANNED, Cancel): _cancel("cancelled: {cancel}"),
    (P.PLANNED, ReplicaFailed): _cancel(_TARGET_FAILED),
    # catching_up: the target replays S2; release once lag <= acceptable_lag.
    (P.CATCHING_UP, WarmupStarted): _ignore,
    (P.CATCHING_UP, LagReported): _release_if_caught_up,
    (P.CATCHING_UP, ReleaseAcked): _remote("acknowledged a release that was never sent",
                                           "check which processor reports this task"),
    (P.CATCHING_UP, Activated): _UNSOLICITED_ACTIVATION,
    (P.CATCHING_UP, ProcessorLost): _on_loss(
        source=_activate_without_release(_FORCED.replace("{cause}", "was lost")),
        target=_cancel("target {target} was lost while catching up")),
    (P.CATCHING_UP, Tick): _CATCH_UP,
    (P.CATCHING_UP, Cancel): _cancel("cancelled: {cancel}"),
    (P.CATCHING_UP, ReplicaFailed): _cancel(_TARGET_FAILED),
    # releasing: SendRelease(source) sent; the source may already have stopped.
    (P.RELEASING, WarmupStarted): _ignore,
    (P.RELEASING, LagReported): _note_lag,
    (P.RELEASING, ReleaseAcked): _activate_after_release,
    (P.RELEASING, Activated): _UNSOLICITED_ACTIVATION,
    (P.RELEASING, ProcessorLost): _on_loss(
        source=_activate_without_release(_FORCED.replace("{cause}", "was lost while releasing")),
        target=_cancel("target {target} was lost during the release; {source} resumes")),
    (P.RELEASING, Tick): _on_timeout(
        lambda c: c.release_timeout_s,
        _activate_without_release(_FORCED.replace(
            "{cause}", "did not acknowledge the release within {release_timeout_s} s"))),
    (P.RELEASING, Cancel): _cancel("cancelled during the release ({cancel}); {source} resumes"),
    (P.RELEASING, ReplicaFailed): _cancel(_TARGET_FAILED + "; {source} resumes"),
    # activating: SendActivate(target) sent; the target may be writing output.
    (P.ACTIVATING, WarmupStarted): _ignore,
    (P.ACTIVATING, LagReported): _ignore,
    (P.ACTIVATING, ReleaseAcked): _duplicate_release,
    (P.ACTIVATING, Activated): _go(P.DONE),
    (P.ACTIVATING, ProcessorLost): _on_loss(
        source=_note_source_gone,
        target=_abandon_target("target {target} was lost while activating")),
    (P.ACTIVATING, Tick): _on_timeout(
        lambda c: c.activate_timeout_s,
        _abandon_target("target {target} did not report the task active within "
                        "{activate_timeout_s} s: declared dead")),
    (P.ACTIVATING, ReplicaFailed): _abandon_target(_TARGET_FAILED, declare_dead=False),
    (P.ACTIVATING, Cancel): _local(
        "too late to cancel, {target} was told to activate; wait for done (then plan "
        "a move back) or for the activation timeout"),
    # done: the target owns the task. Late news is stale.
    (P.DONE, WarmupStarted): _ignore,
    (P.DONE, LagReported): _ignore,
    (P.DONE, ReleaseAcked): _ignore,
    (P.DONE, Activated): _ignore,
    (P.DONE, ProcessorLost): _ignore,  # the assignor handles the loss of the new owner
    (P.DONE, Tick): _ignore,
    (P.DONE, Cancel): _local("the move already finished; plan a move back instead"),
    (P.DONE, ReplicaFailed): _ignore,  # the new owner's own failure: the core re-places
    # cancelled: the source (or nobody) owns the task.
    (P.CANCELLED, WarmupStarted): _ignore,
    (P.CANCELLED, LagReported): _ignore,
    (P.CANCELLED, ReleaseAcked): _ignore,  # the source was told to resume after this ack
    (P.CANCELLED, Activated): _remote(
        "reports the task active after the move was cancelled",
        "it was declared dead or never told to activate; the resumed owner's fencing "
        "rejects its output, but stop that processor"),
    (P.CANCELLED, ProcessorLost): _ignore,
    (P.CANCELLED, Tick): _ignore,
    (P.CANCELLED, Cancel): _ignore,
    (P.CANCELLED, ReplicaFailed): _ignore,
})


del P


def _say(template: str, s: _Step) -> str:
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


def _check_sender(handoff: Handoff, event: Event) -> None:
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


def _remote_error(s: _Step, why: str, action: str) -> RemoteHandoffError:
    h, sender = s.handoff, _sender(s.handoff, s.event)
    return RemoteHandoffError(
        f"task {h.task!r} handoff {h.source}->{h.target} is {h.phase}: {sender} {why}. "
        f"Next: {action}", processor=sender)
