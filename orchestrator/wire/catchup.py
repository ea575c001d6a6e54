"""The catch-up rule, in one place: a replica is caught up when its lag is known and at
most `acceptable_lag` records (KIP-441). An unknown lag is never caught up: a task must
not move on a guess. Both daemons apply it: the coordinator to start a handoff, a
processor to know its activation is next (it then heartbeats faster)."""

from __future__ import annotations

__all__ = ["is_caught_up"]


def is_caught_up(lag: float | None, acceptable_lag: int) -> bool:
    """True when `lag` records (None or infinity: unknown) are within `acceptable_lag`."""
    return lag is not None and lag <= acceptable_lag
