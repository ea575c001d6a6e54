"""A task's lifecycle on one processor, as data: every (stage, event) pair decided in one
table, and a pure `step()` that returns the commands the driver carries out.

The coordinator decides where a task goes (orchestrator/core/handoff/); this table
decides what one processor does with a task it is told about or that something happened
to: a reply that lists it in another role, a fence that finished, a replay that reached
T1, a transaction that aborted, a producer that another owner fenced, a full disk. The
driver (processor/runtime/driver.py) turns what happened into an `Event`, steps,
and carries out the `Command`s in order; it decides nothing itself.

Two properties hold by construction and are tested by walking the table
(tests/processor/test_lifecycle.py):

- a task that failed, or whose producer another owner fenced, is never started again
  until the coordinator has seen the failure and stopped listing it (`FAILURE_SEEN`):
  the coordinator, not the processor, decides where it goes next;
- within one reply, a task's commands come in `RECONCILE_ORDER` (what frees comes
  before what starts: a release before a replica of the same task, a split child's
  release before its parent grows into the child's partitions), so the runtime can run
  a reply's commands command by command across tasks, as `plan()` lists them.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = ["Command", "Event", "FAILURES", "LISTINGS", "RECONCILE_ORDER", "Stage",
           "TABLE", "Transition", "listing_events", "plan", "reply_plan", "step"]


class Stage(enum.Enum):
    """Where a task is on this processor."""

    IDLE = "idle"               # not held here (its store may stay on disk)
    WARMUP = "warmup"           # rebuilding its state (to T2) for a handoff to here
    STANDBY = "standby"         # kept near T1, for a failover to here
    FENCING = "fencing"         # activating: the previous owner fenced, T1 read
    REPLAYING = "replaying"     # activating: applying T2 -> T1 without output
    ACTIVE = "active"           # processing with output, committing
    RELEASED = "released"       # given up; its final T1 reported until it is taken
    FAILED = "failed"           # stopped; the reason reported until the coordinator saw it


class Event(enum.Enum):
    """What happened to a task: from the coordinator's reply, or from its own work."""

    # the coordinator's reply (level-triggered: every reply lists every task again)
    LISTED_ACTIVE = "listed active"
    LISTED_WARMUP = "listed warmup"
    LISTED_STANDBY = "listed standby"
    UNLISTED = "not listed"
    LISTED_UNKNOWN = "listed, not in the job model"     # the model follows: not started
    REPARTITIONED = "its partitions changed"    # expansion or split: a replica's reads
    FAILURE_SEEN = "failure seen"       # unlisted, by a reply to a report of the failure
    # the activation
    FENCE_DONE = "fence done"
    REPLAY_DONE = "a replay reached T1"
    ALL_REPLAYED = "every replay reached T1"
    # a transaction, a change or a read, by how it ended
    COMMITTED = "committed"
    ABORTED = "transaction aborted"     # retriable: rewind to T1 and go on
    PRODUCER_LOST = "producer lost"     # fatal producer error, or a commit past its timeout
    VOIDED = "commit void"              # the brokers took back a commit the store applied
    FENCED = "fenced"                   # another owner's producer took the transactional id
    JOB_FAILED = "job failed"           # process() raised under on_error = "fail"
    STORE_FAILED = "store failed"       # disk full, a damaged block, a store ahead of T1
    BROKER_ERROR = "broker error"       # a change's Kafka call failed
    SOURCE_GONE = "source gone"         # catch-up's records are gone (changelog, offsets)
    INPUT_TRIMMED = "input trimmed"     # retention deleted input a rebuild needs
    FENCE_REFUSED = "fence refused"     # the previous owner still commits after the fence
    HISTORY_MISSING = "history missing"  # a split child's partitions came back with
    #                                      records this store never applied


class Command(enum.Enum):
    """What the runtime does, in the order a transition lists them."""

    FORGET_FAILURE = "forget the failure"
    RELEASE = "release"                 # final commit, report final T1, free the task
    DROP = "drop the replica"           # its store stays on disk for a later return
    SWITCH_ROLE = "switch the replica's role"
    START_REPLICA = "start a replica"
    ACTIVATE = "activate"               # begin the fence (beside the loop)
    GROW = "grow"                       # start an active task's new partitions, if any
    REPLAY_FIRST = "verify the fence, start the first replay"
    REPLAY_NEXT = "start the next replay"
    GO_ACTIVE = "go active"
    REWIND = "rewind to T1"
    STOP_ACTIVE = "stop without committing"
    FREE = "free what it holds"         # after a failed change, in whatever stage
    MARK_FAILED = "mark failed"
    COUNT_ABORTED = "count an aborted transaction"
    COUNT_FENCED = "count a fenced transaction"
    COUNT_TRIMMED = "count trimmed input"


@dataclass(frozen=True)
class Transition:
    """The stage a task is in after an event, and the commands that take it there."""

    stage: Stage
    commands: tuple[Command, ...] = ()


S, E, C = Stage, Event, Command

LISTINGS: Final = (E.LISTED_ACTIVE, E.LISTED_WARMUP, E.LISTED_STANDBY, E.UNLISTED,
                   E.LISTED_UNKNOWN, E.REPARTITIONED, E.FAILURE_SEEN)
ACTIVATION: Final = (E.FENCE_DONE, E.REPLAY_DONE, E.ALL_REPLAYED, E.HISTORY_MISSING)
# what a step on a task may end in, other than a commit
FAILURES: Final = (E.ABORTED, E.PRODUCER_LOST, E.VOIDED, E.FENCED, E.JOB_FAILED, E.STORE_FAILED,
                   E.BROKER_ERROR, E.SOURCE_GONE, E.INPUT_TRIMMED, E.FENCE_REFUSED)

# a reply's commands run command by command across its tasks, in this order
RECONCILE_ORDER: Final = (C.FORGET_FAILURE, C.RELEASE, C.DROP, C.SWITCH_ROLE,
                          C.START_REPLICA, C.ACTIVATE, C.GROW)

_FAIL: Final = (C.FREE, C.MARK_FAILED)
_STOP: Final = (C.STOP_ACTIVE, C.MARK_FAILED)


def _stay(stage: Stage) -> Transition:
    return Transition(stage)


def _failing(stage: Stage) -> dict[Event, Transition]:
    """A change of a task in `stage` (not active) failed: free what it held, fail it.
    The producer a fence took is given up with the rest: an activation starts anew."""
    rows = {e: Transition(S.FAILED, _FAIL) for e in FAILURES}
    rows[E.INPUT_TRIMMED] = Transition(S.FAILED, (C.COUNT_TRIMMED, *_FAIL))
    return rows


def _replica(role: Stage, other: Stage) -> dict[Event, Transition]:
    return {
        E.LISTED_ACTIVE: Transition(S.FENCING, (C.ACTIVATE,)),
        _listed(role): _stay(role),
        _listed(other): Transition(other, (C.SWITCH_ROLE,)),
        E.UNLISTED: Transition(S.IDLE, (C.DROP,)),
        E.LISTED_UNKNOWN: _stay(role),
        E.REPARTITIONED: Transition(S.IDLE, (C.DROP,)),    # the listing starts it again
        E.FAILURE_SEEN: _stay(role),
        **{e: _stay(role) for e in ACTIVATION},
        E.COMMITTED: _stay(role),
        **_failing(role),
    }


def _listed(role: Stage) -> Event:
    return {S.WARMUP: E.LISTED_WARMUP, S.STANDBY: E.LISTED_STANDBY}[role]


def _activating(stage: Stage) -> dict[Event, Transition]:
    """Fencing or replaying: no reply changes it. The activation runs to its end; a
    coordinator that changed its mind meanwhile has the task released by a later reply."""
    rows = {e: _stay(stage) for e in LISTINGS}
    rows.update({e: _stay(stage) for e in ACTIVATION})
    rows[E.COMMITTED] = _stay(stage)
    rows.update(_failing(stage))
    return rows


def _unheld(stage: Stage) -> dict[Event, Transition]:
    """Idle or released: a listing starts it; nothing else concerns it."""
    rows = {
        E.LISTED_ACTIVE: Transition(S.FENCING, (C.ACTIVATE,)),
        E.LISTED_WARMUP: Transition(S.WARMUP, (C.START_REPLICA,)),
        E.LISTED_STANDBY: Transition(S.STANDBY, (C.START_REPLICA,)),
        E.UNLISTED: _stay(stage),
        E.LISTED_UNKNOWN: _stay(stage),
        E.REPARTITIONED: _stay(stage),
        E.FAILURE_SEEN: _stay(stage),
        **{e: _stay(stage) for e in ACTIVATION},
        E.COMMITTED: _stay(stage),
    }
    rows.update(_failing(stage))        # a start that failed
    return rows


_ROWS: dict[Stage, dict[Event, Transition]] = {
    S.IDLE: _unheld(S.IDLE),
    S.WARMUP: _replica(S.WARMUP, S.STANDBY),
    S.STANDBY: _replica(S.STANDBY, S.WARMUP),
    S.FENCING: {**_activating(S.FENCING),
                E.FENCE_DONE: Transition(S.REPLAYING, (C.REPLAY_FIRST,))},
    S.REPLAYING: {**_activating(S.REPLAYING),
                  E.REPLAY_DONE: Transition(S.REPLAYING, (C.REPLAY_NEXT,)),
                  E.ALL_REPLAYED: Transition(S.ACTIVE, (C.GO_ACTIVE,))},
    S.ACTIVE: {
        E.LISTED_ACTIVE: Transition(S.ACTIVE, (C.GROW,)),
        # listed in another role, or not at all: its new owner waits for final T1
        E.LISTED_WARMUP: Transition(S.WARMUP, (C.RELEASE, C.START_REPLICA)),
        E.LISTED_STANDBY: Transition(S.STANDBY, (C.RELEASE, C.START_REPLICA)),
        E.UNLISTED: Transition(S.RELEASED, (C.RELEASE,)),
        E.LISTED_UNKNOWN: Transition(S.ACTIVE, (C.GROW,)),
        E.REPARTITIONED: _stay(S.ACTIVE),       # GROW follows its listing
        E.FAILURE_SEEN: _stay(S.ACTIVE),
        **{e: _stay(S.ACTIVE) for e in ACTIVATION},
        # replay what the store lacks: fence again (the task stays here), then replay
        E.HISTORY_MISSING: Transition(S.FENCING, (C.STOP_ACTIVE, C.ACTIVATE)),
        E.COMMITTED: _stay(S.ACTIVE),
        E.ABORTED: Transition(S.ACTIVE, (C.COUNT_ABORTED, C.REWIND)),
        # fence again, replay, carry on: the task is still this processor's
        E.PRODUCER_LOST: Transition(S.FENCING, (C.STOP_ACTIVE, C.ACTIVATE)),
        # the activation settles its partitions and rebuilds the store it must not serve
        E.VOIDED: Transition(S.FENCING, (C.STOP_ACTIVE, C.ACTIVATE)),
        E.FENCED: Transition(S.FAILED, (C.COUNT_FENCED, *_STOP)),
        E.JOB_FAILED: Transition(S.FAILED, _STOP),
        # Kafka holds what was committed: another owner rebuilds the state
        E.STORE_FAILED: Transition(S.FAILED, _STOP),
        E.BROKER_ERROR: Transition(S.FAILED, _FAIL),
        E.SOURCE_GONE: Transition(S.FAILED, _FAIL),
        E.INPUT_TRIMMED: Transition(S.FAILED, (C.COUNT_TRIMMED, *_FAIL)),
        E.FENCE_REFUSED: Transition(S.FAILED, _FAIL),
    },
    # its final T1 is the last committed offsets, whether the release's own last
    # transaction committed or was void (Commits.final): nothing here depends on which
    S.RELEASED: _unheld(S.RELEASED),
    S.FAILED: {
        # not started again until the coordinator has seen the failure and moved on
        **{e: _stay(S.FAILED) for e in LISTINGS},
        E.FAILURE_SEEN: Transition(S.IDLE, (C.FORGET_FAILURE,)),
        **{e: _stay(S.FAILED) for e in ACTIVATION},
        E.COMMITTED: _stay(S.FAILED),
        **{e: _stay(S.FAILED) for e in FAILURES},
    },
}

TABLE: Final[Mapping[tuple[Stage, Event], Transition]] = MappingProxyType(
    {(stage, event): rule for stage, rows in _ROWS.items() for event, rule in rows.items()})


def step(stage: Stage, event: Event) -> Transition:
    """What `event` does to a task in `stage`."""
    return TABLE[stage, event]


def plan(stages: Mapping[str, Stage], events: Mapping[str, Sequence[Event]]
         ) -> list[tuple[str, Command]]:
    """A reply's commands: each task's events stepped from its stage, then every
    command in `RECONCILE_ORDER` across the tasks (a task's own commands keep their
    order: the table lists them in that order)."""
    found: list[tuple[int, int, str, Command]] = []
    for position, (task, seen) in enumerate(events.items()):
        stage = stages.get(task, S.IDLE)
        for event in seen:
            transition = step(stage, event)
            found.extend((RECONCILE_ORDER.index(c), position, task, c)
                         for c in transition.commands)
            stage = transition.stage
    return [(task, command) for _, _, task, command in sorted(found)]


def listing_events(stage: Stage, listed: Stage | None, stale: bool, failure_seen: bool
                   ) -> tuple[Event, ...]:
    """The events one reply makes for a task in `stage`: `listed` is the role the reply
    gives it (ACTIVE, WARMUP, STANDBY or None), `stale` whether a replica's partitions
    changed, `failure_seen` whether the failure it reported was seen."""
    first: Iterable[Event] = (E.REPARTITIONED,) if stale else ()
    if listed is None:
        return (*first, E.FAILURE_SEEN if failure_seen else E.UNLISTED)
    return (*first, {S.ACTIVE: E.LISTED_ACTIVE, S.WARMUP: E.LISTED_WARMUP,
                     S.STANDBY: E.LISTED_STANDBY}[listed])


def reply_plan(stages: Mapping[str, Stage], listed: Mapping[str, Stage],
               stale: Container[str], seen_failures: Collection[str] | None,
               known: Container[str]) -> list[tuple[str, Command]]:
    """What one heartbeat reply makes this processor do: the commands of every task it
    holds or the reply lists, in `RECONCILE_ORDER` across the tasks.

    A reply lists the tasks this processor should hold, by role; it is level-triggered (a
    reply supersedes the previous one, and the same reply twice changes nothing). So:

    1. a failure the coordinator no longer lists is forgotten only once it has seen it
       (`seen_failures`, the failed tasks the answered heartbeat reported; None: all):
       a reply answers a heartbeat sent before a failure that came since, and a task
       that failed while its release was on its way (a fence, its transaction timed out
       by the broker) is listed by neither. Forgotten then, the failure would never be
       reported, and the coordinator would wait for a release that cannot come until it
       declared the whole processor dead;
    2. active tasks no longer listed active are released (their new owner waits for
       final T1);
    3. replicas no longer listed, or whose partitions changed (`stale`), are dropped and
       the others switch role (warmup <-> standby); an activating task stays as it is;
    4. listed replicas not held yet start, then listed active tasks activate;
    5. active tasks start their new partitions (expansion).

    Args:
        stages: each task's stage here, for every task held or listed.
        listed: the role the reply gives each task it lists (ACTIVE, WARMUP, STANDBY).
        stale: the replicas whose partitions are no longer the ones they read.
        seen_failures: see 1.
        known: the tasks of the job model; one listed outside it is not started yet
            (the model follows).
    """
    events: dict[str, tuple[Event, ...]] = {}
    for task, stage in stages.items():
        role = listed.get(task)
        if role is not None and task not in known:
            events[task] = (*((E.REPARTITIONED,) if task in stale else ()), E.LISTED_UNKNOWN)
        else:
            seen = stage is S.FAILED and (seen_failures is None or task in seen_failures)
            events[task] = listing_events(stage, role, task in stale, seen)
    return plan(stages, events)
