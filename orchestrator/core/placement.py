"""Placement: run the KIP-441 assignor on the core's current picture and turn its
answer into role listings and handoffs (still no I/O).

The assignor is pure and knows nothing of handoffs, so this module translates both
ways. Into the assignor: each live, non-draining processor with its listed roles and
its replicas' lags; a handoff before its release counts as active on the source and
warming up on the target, later (or when the source drains) as active on the
target. Draining processors are left out, so their tasks look ownerless to the
assignor and get a new home. Out of the assignor, per task:

- a handoff in flight is left alone, unless it has not released yet and the
  assignor no longer wants its target (Cancel);
- an ownerless task is listed active on its home at once (its activation fences
  whatever producer the previous owner left);
- a warmup on a non-owner, or a caught-up home other than the owner, becomes a
  handoff; at most `max_warmups` handoffs catch up at a time;
- standbys are listed as the assignor says, except on either side of a handoff (a
  source told to keep a standby would stop reporting the task "released").

Split children (docs/design.md, "Growing past the number of tasks"): the assignor sees
a pending child as a task with no owner (were it shown active on its parent's owner, the
assignor would as soon move the parent, and the child with it, as the child: they would
chase each other).
Where the assignor puts it, it moves through a handoff from the parent's owner (the
state is there); left on the parent's owner, it stays embedded.
A parent and its pending children never move at the same time: the parent waits while
a child is on its way out, a child waits while its parent moves.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Protocol

from orchestrator.core import handoff as hs
from orchestrator.core.assignment import AssignmentError, ProcessorSnapshot, TaskInfo, assign
from orchestrator.core.failures import Failures
from orchestrator.core.handoff_driver import HandoffBook
from orchestrator.core.liveness import Liveness
from orchestrator.core.model import JobModel
from orchestrator.core.roles import RoleBook
from orchestrator.core.settings import CoreConfig
from orchestrator.wire.catchup import is_caught_up
from orchestrator.wire.clock import Clock

__all__ = ["PLACE_EVERY_S", "PlacementPace", "PlacementView", "place"]

log = logging.getLogger("baton.coordinator")

# a quiet job is placed again this often anyway (failure backoffs and standbys' lags
# change with time, not with news)
PLACE_EVERY_S = 60.0


class PlacementView(Protocol):
    """What placement reads and edits of the coordinator core (no import cycle)."""

    config: CoreConfig
    model: JobModel
    processors: Liveness
    roles: RoleBook
    handoff_book: HandoffBook
    draining: set[str]
    failures: Failures
    clock: Clock
    follow_up: bool

    @property
    def handoffs(self) -> dict[str, hs.Handoff]: ...
    def owner(self, task: str) -> str | None: ...
    def holder(self, task: str) -> str | None: ...
    def lag(self, task: str, pid: str) -> int | None: ...
    def task_infos(self) -> list[TaskInfo]: ...


class PlacementPace:
    """When the assignor runs again. A large job's placement costs enough CPU that
    running it on every tick of a quiet job starves the threads answering heartbeats
    (docs/performance.md, "Measurements behind the code"), so it runs only when it has
    something new to weigh, and not before the processors have reported after a restart.

    Args:
        settle_by: until when a restarted coordinator waits for every live processor's
            first report (its picture of their tasks) before it places.
    """

    def __init__(self, settle_by: float) -> None:
        self.settle_by = settle_by
        # news from a processor since the last placement: a registration, a loss,
        # changed roles, replicas' lags (set by the core as they come)
        self.news = True
        self._placed: tuple[float, JobModel] | None = None     # when, and on which model

    def due(self, core: PlacementView, now: float) -> bool:
        """Settled, and something new: news, a handoff in flight, a follow-up, a
        drain, a failure, a new model, or `PLACE_EVERY_S` since the last placement
        (time-based decisions). Conservative: a placement with nothing new changes
        nothing."""
        if now < self.settle_by and not all(p.reported for p in core.processors.live()):
            return False
        if self.news or core.follow_up or core.handoffs or core.draining:
            return True
        if self._placed is None or self._placed[1] is not core.model:
            return True
        return bool(core.failures.by_task) or now - self._placed[0] >= PLACE_EVERY_S

    def placed(self, core: PlacementView, now: float) -> None:
        """A placement ran on what `core` holds now (a handoff may end any turn: news)."""
        self.news = bool(core.handoffs)
        self._placed = (now, core.model)


def place(core: PlacementView) -> bool:
    """One placement step; returns the assignor's `follow_up` (more moves to come)."""
    live = [p.id for p in core.processors.live()]
    candidates = [pid for pid in live if pid not in core.draining]
    coming, going = _in_flight(core)
    try:
        result = assign(core.task_infos(),
                        [_state(core, pid, coming[pid], going[pid]) for pid in candidates],
                        core.config.assignment)
    except AssignmentError as exc:
        log.error("assignment failed: %s", exc)
        return False
    owners = result.owners()
    warm = {t: p.id for p in result.processors for t in p.warmup}
    load = {pid: len(core.roles.peek(pid).active) for pid in candidates}
    # warm-ups this step may still start (counted once, not once per task)
    room = [core.config.assignment.max_warmups - core.handoff_book.catching_up()]
    for task in core.model.tasks:
        _place_task(core, task, owners.get(task), warm.get(task), load, room)
    in_handoff: dict[str, set[str]] = defaultdict(set)     # processor -> its handoffs' tasks
    incoming: dict[str, set[str]] = defaultdict(set)   # processor -> tasks coming to it
    for handoff in core.handoffs.values():
        for pid in (handoff.source, handoff.target):
            if pid is not None:
                in_handoff[pid].add(handoff.task)
        incoming[handoff.target].add(handoff.task)
    for wanted in result.processors:
        roles = core.roles.get(wanted.id)
        roles.warmup &= incoming[wanted.id]
        roles.standby = (set(wanted.standby) - roles.active - roles.warmup - in_handoff[wanted.id]
                         - _barred(core, wanted.id))
    for pid in core.draining & set(live):
        roles = core.roles.get(pid)
        roles.warmup.clear()
        roles.standby.clear()
    return result.follow_up


def _in_flight(core: PlacementView) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per processor, the tasks in-flight handoffs bring to it and take from it, as the
    assignor counts them (where they are going): one pass over the handoffs, not one
    per processor."""
    coming: dict[str, set[str]] = defaultdict(set)
    going: dict[str, set[str]] = defaultdict(set)
    for task, handoff in core.handoffs.items():
        before_release = handoff.phase in (hs.Phase.PLANNED, hs.Phase.CATCHING_UP)
        if before_release and handoff.source not in core.draining:
            continue    # the source stays the owner until the release
        coming[handoff.target].add(task)
        if handoff.source is not None:
            going[handoff.source].add(task)
    return coming, going


def _state(core: PlacementView, pid: str, coming: set[str], going: set[str]
           ) -> ProcessorSnapshot:
    """The assignor's view of `pid`: in-flight handoffs count where they are going."""
    roles = core.roles.peek(pid)
    active = (roles.active | coming) - going
    warmup = roles.warmup - coming
    processor = core.processors.get(pid)
    reported = processor.reports if processor is not None else {}
    # only a task `pid` reports a replica of has a lag: look at those, not every task
    lags = {t: lag for t in reported
            if t in core.model.tasks and t not in active
            and (lag := core.lag(t, pid)) is not None}
    barred = _barred(core, pid)
    if processor is not None and processor.disk_full:
        barred |= set(core.model.tasks) - active - roles.standby - warmup
    return ProcessorSnapshot(pid, 1, frozenset(active), frozenset(roles.standby),
                             frozenset(warmup), lags, frozenset(barred))


def _barred(core: PlacementView, pid: str) -> set[str]:
    """The tasks `pid` may not be given: those it failed recently."""
    return core.failures.blocked(pid, core.clock.monotonic())


def _place_task(core: PlacementView, task: str, home: str | None, warm: str | None,
                load: dict[str, int], room: list[int]) -> None:
    """One task: keep it, list it directly, plan a handoff, or cancel a stale one."""
    handoff = core.handoffs.get(task)
    if handoff is not None:
        # a draining source's task keeps its handoff unless its target drains too (two
        # drains in a row: the first one's handoffs may go to the second processor,
        # whose warmups the drain cleared, so they would never end)
        if handoff.phase in (hs.Phase.PLANNED, hs.Phase.CATCHING_UP) \
                and handoff.target not in (home, warm) \
                and (handoff.source not in core.draining or handoff.target in core.draining):
            core.handoff_book.step(
                handoff, hs.Cancel(f"the assignor now wants it on {warm or home}"))
        return
    if _family_in_handoff(core, task):
        return
    owner = core.holder(task)
    home, warm = core.failures.steer(task, owner, home, warm, load, core.clock.monotonic())
    if task in core.model.pending:
        _place_child(core, task, home, warm, room)
        return
    target = warm if owner is not None and warm is not None else home
    if target is None or target == owner:
        return
    if owner is None:
        log.info("task %r has no live owner: active on %s", task, target)
        core.roles.list_active(task, target)
        load[target] = load.get(target, 0) + 1
        return
    _move(core, task, owner, target, room)


def _move(core: PlacementView, task: str, source: str, target: str, room: list[int]) -> None:
    """Plan a handoff, unless its target must warm up and `max_warmups` are running
    (`room`: how many more may start in this step)."""
    lag = core.lag(task, target)
    caught_up = is_caught_up(lag, core.config.handoff.acceptable_lag)
    if not caught_up:
        if room[0] <= 0:
            return
        room[0] -= 1
    core.handoff_book.plan(task, source, target, lag)


def _family_in_handoff(core: PlacementView, task: str) -> bool:
    """A split parent with a pending child in a handoff, or a child whose parent moves."""
    parent = core.model.pending.get(task)
    if parent is not None:
        return parent in core.handoffs
    return any(c in core.handoffs for c, p in core.model.pending.items() if p == task)


def _place_child(core: PlacementView, task: str, home: str | None, warm: str | None,
                 room: list[int]) -> None:
    """A pending split child leaves its parent's owner only through a handoff."""
    holder = core.holder(task)
    target = warm or home
    if holder is None or target is None or target == holder:
        return
    _move(core, task, holder, target, room)
