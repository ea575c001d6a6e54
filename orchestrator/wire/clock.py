"""Injected time: a `Clock` protocol, the real clock, a fake one, and `Deadline` objects.

Why: every timeout in Baton (release, activation, heartbeat grace, coordinator
grace) must be testable without sleeping. Code takes a `Clock` instead of calling
`time.*`, and bounds multi-step operations with a `Deadline` armed on that clock
(after trio's clock injection and deadline objects). Tests pass a `FakeClock`, whose
time only moves when the test says so: `advance(s)`, or `jump_to_next_deadline()`
to the earliest armed, unexpired `Deadline` created on it.

`monotonic()` is for measuring intervals (never jumps); `time()` is wall time for
humans and for anything compared across processes (logs, status output).
"""

from __future__ import annotations

import math
import time as _time
import weakref
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "Deadline", "FakeClock", "SystemClock"]

# A fake clock's wall time starts here (2023-11-14T22:13:20Z), so wall timestamps in
# tests look like real ones and never collide with small monotonic values.
_FAKE_WALL_EPOCH = 1_700_000_000.0


@runtime_checkable
class Clock(Protocol):
    """The seam for time: the only way Baton code reads time or waits."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for intervals and deadlines)."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the Unix epoch (for humans and cross-process stamps)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for `seconds` (a fake clock advances instead)."""
        ...


class SystemClock:
    """The real clock: `time.monotonic`, `time.time`, `time.sleep`."""

    def monotonic(self) -> float:
        return _time.monotonic()

    def time(self) -> float:
        return _time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            _time.sleep(seconds)


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

    def _track(self, deadline: Deadline) -> None:
        self._deadlines.add(deadline)


class Deadline:
    """A point in time on an injected clock, armed and re-armed by its owner.

    Unarmed, it never expires and has infinite time remaining, so a loop can use
    the same code path whether or not a bound applies.

    Args:
        clock: the clock to read; deadlines on a `FakeClock` are visible to its
            `jump_to_next_deadline()`.
    """

    __slots__ = ("__weakref__", "_at", "_clock")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._at: float | None = None
        if isinstance(clock, FakeClock):
            clock._track(self)

    @classmethod
    def after(cls, clock: Clock, seconds: float) -> Deadline:
        """A deadline armed `seconds` from now."""
        deadline = cls(clock)
        deadline.arm(seconds)
        return deadline

    @property
    def at(self) -> float | None:
        """The monotonic time at which it expires, or None when unarmed."""
        return self._at

    def arm(self, seconds: float) -> None:
        """Expire `seconds` from now (replacing any earlier arming).

        Raises:
            ValueError: when `seconds` is negative or NaN (a caller bug, not a timeout).
        """
        if seconds < 0 or math.isnan(seconds):
            raise ValueError(f"Deadline.arm({seconds!r}): seconds must be >= 0")
        self._at = self._clock.monotonic() + seconds

    def disarm(self) -> None:
        """Never expire (until armed again)."""
        self._at = None

    def expired(self) -> bool:
        """True once the clock has reached the armed time; never true when unarmed."""
        return self._at is not None and self._clock.monotonic() >= self._at

    def remaining(self) -> float:
        """Seconds left (0.0 once expired, `math.inf` when unarmed)."""
        if self._at is None:
            return math.inf
        return max(0.0, self._at - self._clock.monotonic())

    def __repr__(self) -> str:
        state = "unarmed" if self._at is None else f"at={self._at:.3f}"
        return f"Deadline({state}, remaining={self.remaining():.3f})"
