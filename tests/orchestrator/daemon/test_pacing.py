"""The coordinator loop's pacing: periodic work is spaced by the CPU it cost, not by
time spent waiting on the broker (a decision's persist waits on the stream)."""

from __future__ import annotations

import time

from orchestrator.daemon.leader import paced
from orchestrator.wire.clock import Deadline
from tests.clocks import FakeClock


def test_waiting_does_not_space_the_next_turn() -> None:
    clock = FakeClock()
    deadline = Deadline.after(clock, 0.0)
    took = paced(deadline, 0.5, 3.0, lambda: time.sleep(0.3))     # waits, no CPU
    assert took < 0.05
    assert deadline.remaining() == 0.5                               # the floor


def test_cpu_spent_spaces_the_next_turn() -> None:
    clock = FakeClock()
    deadline = Deadline.after(clock, 0.0)

    def burn() -> None:
        ends = time.thread_time() + 0.3
        while time.thread_time() < ends:
            pass

    took = paced(deadline, 0.5, 3.0, burn)
    assert took >= 0.3
    assert deadline.remaining() >= 0.9
