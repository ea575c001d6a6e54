"""The handoff driver: feeds the pure handoff state machine and carries out its commands.

orchestrator/core/handoff/ decides; this module is its driver inside the coordinator
core (still no I/O). It turns processor reports into events (WarmupStarted,
LagReported, ReleaseAcked, Activated, Tick) and commands into the role listings the
heartbeat replies carry: StartWarmup adds the task to the target's `warmup`,
SendRelease removes it from the source's `active`, SendActivate / ResumeOwner list
it as the *only* active owner, DeclareDeadFn calls back into the core, in order, which
invalidates that execution (so a task is never listed on a processor about to be
declared dead while it is listed on another). Finished handoffs are counted in the metrics, with the
new owner's reported pause once it reports one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from metrics import HANDOFF_PHASES, CoordinatorMetrics, HandoffOutcome, HandoffSample
from orchestrator.core import handoff as hs
from orchestrator.core.roles import RoleBook
from orchestrator.wire.catchup import is_caught_up
from orchestrator.wire.clock import Clock
from orchestrator.wire.protocol import TaskReport

__all__ = ["HandoffBook", "Reports"]

log = logging.getLogger("baton.coordinator")

# the phases that wait on a processor's acknowledgement, through the coordinator
_ACKNOWLEDGED = frozenset({hs.Phase.RELEASING, hs.Phase.ACTIVATING})

# A finished handoff's pause is reported by the new owner with its first committed
# output; wait this long for it before giving up on observing it (a task with no input
# traffic never outputs). The handoff itself is counted when it ends.
_PAUSE_WAIT_S = 60.0
# Finished handoffs kept in memory for `status` (newest last).
_HISTORY = 50
_BEFORE_ACTIVATION = (hs.Phase.PLANNED, hs.Phase.CATCHING_UP, hs.Phase.RELEASING)


class Reports(Protocol):
    """What the driver reads from the core: reports and lags of valid processors."""

    def report(self, pid: str | None, task: str) -> TaskReport | None: ...

    def lag(self, task: str, pid: str) -> int | None: ...


@dataclass(frozen=True)
class _Pending:
    """A finished handoff waiting for the new owner's pause report."""

    outcome: str
    target: str
    since: float


DeclareDeadFn = Callable[[str, str], None]


class HandoffBook:
    """The handoffs in flight, keyed by task, and what they did to the role listings.

    Args:
        config: thresholds and timeouts of every handoff.
        roles: the listings the commands edit.
        clock: the injected clock.
        metrics: phases, outcomes and pauses are recorded here.
        declare_dead: `(processor, reason)`: invalidate that execution now.
    """

    def __init__(self, config: hs.HandoffConfig, roles: RoleBook, clock: Clock,
                 metrics: CoordinatorMetrics | None, declare_dead: DeclareDeadFn,
                 is_pending: Callable[[str], bool] = lambda task: False,
                 went_live: Callable[[str], None] = lambda task: None) -> None:
        self.config, self.roles, self.clock, self.metrics = config, roles, clock, metrics
        self._declare_dead = declare_dead
        self._is_pending, self._went_live = is_pending, went_live
        self.handoffs: dict[str, hs.Handoff] = {}
        self.history: list[hs.Handoff] = []
        self._pauses: dict[str, _Pending] = {}

    def resume(self, handoff: hs.Handoff) -> None:
        """Pick up a persisted handoff after a restart (its commands run again)."""
        resumed, commands = hs.resume(handoff, self.clock.monotonic())
        self.handoffs[resumed.task] = resumed
        self.execute(resumed, commands)

    def excuse(self, until: float) -> None:
        """This coordinator could hear no one until `until` (its lease lapsed): a
        release or an activation it waits on counts its time from then, as a
        processor's silence does (liveness.py). Its own silence must not declare an
        owner dead that could not acknowledge to it."""
        for task, handoff in list(self.handoffs.items()):
            if handoff.phase in _ACKNOWLEDGED and handoff.since < until:
                self.handoffs[task] = replace(handoff, since=float(until))

    def plan(self, task: str, source: str, target: str, lag: int | None) -> None:
        """Start moving `task`; released at once when the target is caught up."""
        caught_up = is_caught_up(lag, self.config.acceptable_lag)
        handoff, commands = hs.plan(task, source, target, self.clock.monotonic(),
                                    caught_up=caught_up, lag=lag)
        log.info("task %r: handoff %s -> %s planned (%s)", task, source, target,
                 "caught up" if caught_up else f"lag {lag if lag is not None else 'unknown'}")
        self.handoffs[task] = handoff
        self.execute(handoff, commands)

    def catching_up(self) -> int:
        """Handoffs whose target is still warming up (bounded by max_warmups)."""
        return sum(h.phase in (hs.Phase.PLANNED, hs.Phase.CATCHING_UP)
                   for h in self.handoffs.values())

    def involving(self, pid: str) -> list[hs.Handoff]:
        return [h for h in self.handoffs.values() if pid in (h.source, h.target)]

    def drive(self, reports: Reports) -> None:
        """Feed every handoff what the reports and the clock say."""
        for handoff in list(self.handoffs.values()):
            for event in self._events(handoff, reports):
                current = self.handoffs.get(handoff.task)
                if current is None or current.target != handoff.target:
                    break  # finished (or replaced) by an earlier event's consequences
                self.step(current, event)

    def _events(self, handoff: hs.Handoff, reports: Reports) -> list[hs.Event]:
        """What the reports say about this handoff, then the clock."""
        events: list[hs.Event] = []
        target = reports.report(handoff.target, handoff.task)
        if target is not None and target.role in ("warmup", "standby"):
            events.append(hs.WarmupStarted(handoff.target))
            lag = reports.lag(handoff.task, handoff.target)
            if lag is not None:
                events.append(hs.LagReported(lag))
        if handoff.phase == hs.Phase.RELEASING and handoff.source is not None:
            source = reports.report(handoff.source, handoff.task)
            if source is not None and source.role == "released":
                events.append(hs.ReleaseAcked(dict(source.committed), handoff.source))
        if handoff.phase == hs.Phase.ACTIVATING and target is not None \
                and target.role == "active":
            events.append(hs.Activated(handoff.target))
        events.append(hs.Tick(self.clock.monotonic()))
        return events

    def step(self, handoff: hs.Handoff, event: hs.Event) -> None:
        """Apply one event to the current state of a handoff and run its commands."""
        now = self.clock.monotonic()
        event = self._split_child_event(handoff, event, now)
        try:
            new, commands = hs.step(handoff, event, self.config, now)
        except hs.RemoteHandoffError as exc:
            log.error("%s", exc)
            return
        if new.phase != handoff.phase:
            log.info("task %r handoff %s -> %s: %s -> %s%s", new.task, new.source, new.target,
                     handoff.phase, new.phase, f" ({new.reason})" if new.reason else "")
            if self.metrics is not None and handoff.phase.value in HANDOFF_PHASES:
                self.metrics.record_phase(handoff.phase.value,
                                          max(0.0, now - handoff.since))
        self.handoffs[new.task] = new
        if new.phase in hs.TERMINAL_PHASES:
            self._finish(new)
        self.execute(new, commands)

    def _split_child_event(self, handoff: hs.Handoff, event: hs.Event, now: float) -> hs.Event:
        """A pending split child lives inside its parent until it activates, so losing
        its source (or a release that does not come) cannot be forced through like an
        ordinary move: the child's keys are still in the parent's store, and the
        parent's own fencing covers the child's partitions. Cancel instead: the child
        stays embedded, and the parent is re-placed as any task whose owner is lost."""
        if not self._is_pending(handoff.task) or handoff.phase not in _BEFORE_ACTIVATION:
            return event
        if isinstance(event, hs.ProcessorLost) and event.processor_id == handoff.source:
            return hs.Cancel(f"{handoff.source}, whose parent task holds this split child, "
                             f"was lost")
        late = (handoff.phase == hs.Phase.RELEASING and isinstance(event, hs.Tick)
                and event.now - handoff.since >= self.config.release_timeout_s)
        if late:
            return hs.Cancel(f"{handoff.source} did not release the split child within "
                             f"{self.config.release_timeout_s} s")
        return event

    def execute(self, handoff: hs.Handoff, commands: Sequence[hs.Command]) -> None:
        """Turn commands into role listings and invalidations, in order."""
        for command in commands:
            match command:
                case hs.StartWarmup(task, pid):
                    self.roles.warm_up(task, pid)
                case hs.StopWarmup(task, pid):
                    self.roles.get(pid).warmup.discard(task)
                case hs.SendRelease(task, pid):
                    self.roles.get(pid).active.discard(task)
                case hs.DeclareDead(pid):
                    log.error("processor %s declared dead by the handoff of %r: %s", pid,
                              handoff.task, handoff.reason)
                    self._declare_dead(pid, f"declared dead by the handoff of "
                                            f"{handoff.task!r}: {handoff.reason}")
                case hs.ResumeOwner(task, pid) if self._is_pending(task):
                    pass    # a split child goes back inside its parent (see replies.embedded())
                case hs.SendActivate(task, pid, _) | hs.ResumeOwner(task, pid):
                    if self._is_pending(task):
                        self._went_live(task)
                    self.roles.list_active(task, pid)

    def _finish(self, handoff: hs.Handoff) -> None:
        del self.handoffs[handoff.task]
        self.history = [*self.history, handoff][-_HISTORY:]
        if handoff.phase == hs.Phase.CANCELLED:
            self.roles.get(handoff.target).warmup.discard(handoff.task)
            if self.metrics is not None:
                self.metrics.record_handoff("cancelled")
            return
        outcome: HandoffOutcome = "fenced" if handoff.source_declared_dead else "done"
        if self.metrics is not None:        # counted when it ends, not when its pause is known
            self.metrics.record_handoff(outcome)
        self._pauses[handoff.task] = _Pending(outcome, handoff.target, self.clock.monotonic())

    def count_pauses(self, reports: Reports) -> None:
        """Observe each finished handoff's pause once the new owner reports it (a task
        without traffic may never: given up after `_PAUSE_WAIT_S`)."""
        now = self.clock.monotonic()
        for task, pending in list(self._pauses.items()):
            report = reports.report(pending.target, task)
            pause = report.pause_ms if report is not None and report.role == "active" else None
            if pause is None and now - pending.since < _PAUSE_WAIT_S:
                continue
            del self._pauses[task]
            if self.metrics is not None and pause is not None:
                self.metrics.record_pause(pause / 1000)

    def samples(self) -> list[HandoffSample]:
        """Scrape-time view for metrics: the handoffs in flight and their phase ages."""
        now = self.clock.monotonic()
        return [HandoffSample(h.task, h.phase.value, max(0.0, now - h.since))
                for h in self.handoffs.values()]
