"""The heartbeat reply: the decision in force for one processor, read off the core."""

from __future__ import annotations

from typing import Protocol

from orchestrator.core import handoff as hs
from orchestrator.core.handoff_driver import HandoffBook
from orchestrator.core.liveness import Liveness, Processor
from orchestrator.core.model import JobModel
from orchestrator.core.roles import RoleBook
from orchestrator.wire.protocol import Barrier, HeartbeatReply

__all__ = ["ReplyView", "drained", "embedded", "in_line", "reply"]

# a split child's handoff before the release: its parent's owner still consumes it
EARLY = (hs.Phase.PLANNED, hs.Phase.CATCHING_UP)


class ReplyView(Protocol):
    """What a reply reads of the coordinator core (no import cycle)."""

    model: JobModel
    processors: Liveness
    roles: RoleBook
    handoff_book: HandoffBook
    draining: set[str]


def embedded(model: JobModel, handoffs: dict[str, hs.Handoff]) -> dict[str, str]:
    """Pending split children whose partitions their parent's owner still consumes:
    all of them but those whose own handoff has reached the release."""
    return {c: p for c, p in model.pending.items()
            if (h := handoffs.get(c)) is None or h.phase in EARLY}


def drained(core: ReplyView, pid: str) -> bool:
    """A draining processor holds nothing and takes part in no handoff."""
    return (pid in core.draining and core.roles.peek(pid).empty()
            and not core.handoff_book.involving(pid))


def releasing_from(core: ReplyView, pid: str) -> list[str]:
    """`pid`'s tasks that another processor is catching up on: told so, `pid` asks
    for its release by long poll, and takes it at once instead of at its next
    heartbeat (on average half an interval inside the handoff pause)."""
    return sorted(h.task for h in core.handoff_book.involving(pid)
                  if h.source == pid and h.phase in EARLY)


def reply(core: ReplyView, processor: Processor, known: int | None) -> HeartbeatReply:
    """The decision in force for `processor`, the job model only when `known` (the
    generation it holds) is stale."""
    model = core.model
    if not processor.valid:
        return HeartbeatReply(alive=False, generation=model.generation)
    processor.generation = model.generation
    children = embedded(model, core.handoff_book.handoffs)
    assignment = core.roles.peek(processor.id).wire()
    moving, stop = releasing_from(core, processor.id), drained(core, processor.id)
    if known == model.generation:     # the model only when stale
        return HeartbeatReply(
            alive=True, generation=model.generation, same_model=True, embedded=children,
            assignment=assignment, moving=moving, stop=stop)
    # built from the core's own, valid data: `model_construct` skips validating the
    # job model again (it is large and was validated when it was made); every field is
    # given (its defaults are slow to compute)
    return HeartbeatReply.model_construct(
        alive=True, generation=model.generation, tasks=model.tasks,
        barriers={c: Barrier(parent=p, offset=o, settled=c not in model.unsettled)
                  for c, (p, o) in model.barriers.items()},
        embedded=children, pending=dict(model.pending), changelog=dict(model.changelog),
        assignment=assignment, moving=moving, stop=stop, unknown=False, same_model=False)


def in_line(core: ReplyView, pid: str) -> bool:
    """`pid` reports exactly the active tasks it is listed with, none in flight: it
    has nothing to do until the decision changes (a long poll may wait)."""
    processor = core.processors.get(pid)
    if processor is None or not processor.valid:
        return False
    listed = set(core.roles.peek(pid).active)
    reported = {t for t, r in processor.reports.items() if r.role == "active"}
    busy = any(r.role == "activating" for r in processor.reports.values())
    catching_up = any(h.target == pid and h.phase in EARLY
                      for h in core.handoff_book.involving(pid))
    return listed == reported and not busy and not catching_up
