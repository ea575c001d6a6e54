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

Phases (persisted as these strings, pinned: docs/design.md, "What is pinned")::

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

from dataclasses import replace

from orchestrator.core.handoff.errors import LocalHandoffError
from orchestrator.core.handoff.events import (
    Command,
    DeclareDead,
    Event,
    Handoff,
    HandoffConfig,
    Persist,
    Phase,
    ResumeOwner,
    SendActivate,
    SendRelease,
    StartWarmup,
    StopWarmup,
)
from orchestrator.core.handoff.rules import Step, check_sender
from orchestrator.core.handoff.table import TRANSITIONS

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
    check_sender(handoff, event)
    new, commands = rule(Step(handoff, event, config, now))
    if new.phase != handoff.phase:
        new = replace(new, since=float(now))
    if new.same_but_lag(handoff):
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
