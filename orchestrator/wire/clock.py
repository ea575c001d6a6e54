"""Injected time: a `Clock` protocol, the real clock, and `Deadline` objects.

Why: every timeout in Baton (release, activation, heartbeat grace, coordinator
grace) must be testable without sleeping. Code takes a `Clock` instead of calling
`time.*`, and bounds multi-step operations with a `Deadline` armed on that clock
(after trio's clock injection and deadline objects). Tests pass a fake clock
(tests/clocks.py), whose time only moves when the test says so; a clock that is a
`DeadlineWatcher` hears of every `Deadline` created on it, so it can jump to the
earliest.

`monotonic()` is for measuring intervals (never jumps); `time()` is wall time for
humans and for anything compared across processes (logs, status output).
"""

from __future__ import annotations

import math
import time as _time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "Deadline", "DeadlineWatcher", "SystemClock"]


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


@runtime_checkable
class DeadlineWatcher(Protocol):
    """A clock that wants to know its deadlines (the tests' fake clock jumps to them)."""

    def watch(self, deadline: Deadline) -> None:
        """`deadline` was created on this clock."""
        ...


class Deadline:
    """A point in time on an injected clock, armed and re-armed by its owner.

    Unarmed, it never expires and has infinite time remaining, so a loop can use
    the same code path whether or not a bound applies.

    Args:
        clock: the clock to read; a `DeadlineWatcher` clock is told of the deadline.
    """

    __slots__ = ("__weakref__", "_at", "_clock")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._at: float | None = None
        if isinstance(clock, DeadlineWatcher):
            clock.watch(self)

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
