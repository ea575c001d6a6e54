"""Forgetting a dead processor: when the coordinator may drop one for good (pure
decisions over the core's plain data, no I/O).

A processor declared dead (silent, not released in time, replaced) is kept as invalid,
so `baton status` shows it and `baton_processors{state="dead"}` counts it until it
comes back: an operator sees what was lost. One lost for good (its host is gone) would
be counted, and alerted on, forever. Forgetting removes it: by an operator
(`baton forget`, POST /forget), or on its own once it has been dead for
`coordinator.forget_dead_after_ms` (0: never). The removal is a change of the core's
records like any other (its "processor/<id>" record is deleted in the coordinator
stream), so a coordinator that takes over does not bring it back.

Only a dead processor can be forgotten: a live one is scaled in with `baton drain`. A
dead one that a handoff in flight still names (a source declared dead during its
release, whose task the target is activating) waits until that handoff ends, so the
handoff never loses track of a side.
"""

from __future__ import annotations

from collections.abc import Iterable, Set

from orchestrator.core.liveness import Processor

__all__ = ["ForgetError", "due", "refusal"]


class ForgetError(RuntimeError):
    """A processor that cannot be forgotten now (it is alive, or a handoff names it)."""


def refusal(processor: Processor, in_handoffs: Set[str]) -> str | None:
    """Why `processor` cannot be forgotten now; None when it can.

    Args:
        processor: the processor an operator (or the timer) wants to forget.
        in_handoffs: the ids a handoff in flight names (source or target).

    Returns:
        The reason, naming the processor and what to do instead; None if forgettable.
    """
    pid = processor.id
    if processor.valid:
        return (f"processor {pid!r} is alive (execution {processor.execution_id}): only a "
                f"dead processor is forgotten; to scale it in, run "
                f"`baton drain --processor {pid}`")
    if pid in in_handoffs:
        return (f"processor {pid!r} is dead ({processor.reason}) but a handoff in flight "
                f"still names it; it ends within coordinator.release_timeout_ms or "
                f"activate_timeout_ms: try again then")
    return None


def due(processors: Iterable[Processor], in_handoffs: Set[str], now: float,
        after_s: float) -> list[str]:
    """The dead processors to forget on their own now.

    Args:
        processors: every known processor.
        in_handoffs: the ids a handoff in flight names (those wait, see `refusal`).
        now: the wall-clock reading.
        after_s: `coordinator.forget_dead_after_ms` in seconds; 0: never.

    Returns:
        Their ids, by id.
    """
    if after_s <= 0:
        return []
    return [p.id for p in processors
            if not p.valid and p.died_at is not None and now - p.died_at >= after_s
            and refusal(p, in_handoffs) is None]
