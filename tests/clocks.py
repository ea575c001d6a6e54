"""The tests' clock: time moves only when a test says so (`advance`, `jump_to`,
`jump_to_next_deadline`), so every timeout is tested without sleeping."""

from __future__ import annotations

import math
import weakref

from orchestrator.wire.clock import Deadline

__all__ = ["FakeClock"]

# A fake clock's wall time starts here (2023-11-14T22:13:20Z), so wall timestamps in
# tests look like real ones and never collide with small monotonic values.
_FAKE_WALL_EPOCH = 1_700_000_000.0


class FakeClock:
    """A clock that moves only when told, for deterministic timeout tests.

    Wall time moves in step with monotonic time. `sleep()` advances the clock
    instead of blocking, so code under test that sleeps returns at once.

    Args:
        start: the initial monotonic reading.
        wall_start: the initial wall-clock reading.
    """

    def __init__(self, start: float = 0.0, wall_start: float = _FAKE_WALL_EPOCH) -> None:
        self._now = float(start)
        self._wall_offset = float(wall_start) - float(start)
        self._deadlines: weakref.WeakSet[Deadline] = weakref.WeakSet()
        self.slept: list[float] = []  # every sleep() request, for assertions

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._now + self._wall_offset

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`.

        Raises:
            ValueError: when `seconds` is negative (a monotonic clock never goes back).
        """
        if seconds < 0 or math.isnan(seconds):
            raise ValueError(f"FakeClock.advance({seconds!r}): time only moves forward")
        self._now += seconds

    def jump_to(self, when: float) -> None:
        """Move time forward to the monotonic reading `when` (no-op if already past)."""
        if when > self._now:
            self._now = when

    def jump_to_next_deadline(self) -> float | None:
        """Jump to the earliest armed, unexpired deadline created on this clock.

        Returns:
            The new monotonic time, or None (time unchanged) when no deadline is pending.
        """
        pending = [d.at for d in self._deadlines if d.at is not None and d.at > self._now]
        if not pending:
            return None
        self._now = min(pending)
        return self._now

    def watch(self, deadline: Deadline) -> None:
        """Remember `deadline` for `jump_to_next_deadline()`."""
        self._deadlines.add(deadline)
