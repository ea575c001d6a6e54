"""The injected clock (orchestrator/wire/clock.py), which every timeout relies on, and
the tests' fake clock (tests/clocks.py)."""

from __future__ import annotations

import math

import pytest

from orchestrator.wire.clock import Clock, Deadline, SystemClock
from tests.clocks import FakeClock


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock(start=5.0, wall_start=1000.0)
    assert isinstance(clock, Clock) and isinstance(SystemClock(), Clock)
    assert (clock.monotonic(), clock.time()) == (5.0, 1000.0)
    clock.advance(2.5)
    clock.sleep(0.5)
    assert (clock.monotonic(), clock.time(), clock.slept) == (8.0, 1003.0, [0.5])
    clock.jump_to(7.0)  # never backwards
    assert clock.monotonic() == 8.0
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)


def test_deadline_arm_expire_remaining_disarm() -> None:
    clock = FakeClock()
    deadline = Deadline(clock)
    assert (deadline.expired(), deadline.remaining(), deadline.at) == (False, math.inf, None)
    deadline.arm(3.0)
    clock.advance(1.0)
    assert (deadline.expired(), deadline.remaining(), deadline.at) == (False, 2.0, 3.0)
    clock.advance(2.0)
    assert deadline.expired() and deadline.remaining() == 0.0
    deadline.disarm()
    assert not deadline.expired()
    with pytest.raises(ValueError):
        deadline.arm(-0.1)
    assert "unarmed" in repr(deadline)


def test_fake_clock_jumps_to_the_next_armed_deadline() -> None:
    clock = FakeClock()
    late, soon, unarmed = Deadline.after(clock, 9.0), Deadline.after(clock, 4.0), Deadline(clock)
    assert clock.jump_to_next_deadline() == 4.0 and soon.expired() and not late.expired()
    assert clock.jump_to_next_deadline() == 9.0 and late.expired()
    assert clock.jump_to_next_deadline() is None and clock.monotonic() == 9.0
    assert not unarmed.expired()


def test_system_clock_reads_real_time() -> None:
    clock = SystemClock()
    first = clock.monotonic()
    clock.sleep(0)
    assert clock.monotonic() >= first and clock.time() > 1_600_000_000
    assert not Deadline.after(clock, 60).expired()
