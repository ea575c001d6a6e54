"""A platform's scale-in is a SIGTERM: with `processor.drain_on_stop_ms` the processor
first asks to be drained, so its tasks move warm (a handoff each, with catch-up) before
it stops with exit 0; a second SIGTERM stops it at once. Under traffic, with the
running-sum oracle."""

from __future__ import annotations

import re
import signal
import time

import pytest

from tests.orchestrator.test_e2e import finish, start_two
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


def handoffs_done(j) -> float:
    text = j.metrics()
    found = re.search(r'baton_handoffs_total\{job="[^"]+",outcome="done"\} ([0-9.e+]+)', text)
    return float(found.group(1)) if found else 0.0


def test_sigterm_drains_warm_then_stops(job, broker) -> None:
    j = job(processor={"drain_on_stop_ms": 60000})
    feeder = start_two(j, broker)
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    held = j.holding()["p2"]
    before = handoffs_done(j)
    j.signal(["p2"], signal.SIGTERM)
    assert j.processors["p2"].wait(90) == 0
    log = j.processors["p2"].log()
    assert "asked to stop: draining first" in log
    assert "drained: no active task left" in log
    del j.processors["p2"]
    assert set(held) <= set(j.holding()["p1"])
    # each of p2's tasks moved by a handoff (a warmup caught up, then the release): none
    # was dropped by a leaving processor and started cold
    assert handoffs_done(j) - before == len(held)
    assert "asks to be drained before it stops" in j.coordinator.log()
    finish(j, feeder, broker)


def test_a_second_sigterm_stops_at_once(job, broker) -> None:
    # a drain that cannot end: nowhere to move p1's tasks but p2, which is frozen
    j = job(processor={"drain_on_stop_ms": 120000})
    feeder = start_two(j, broker)
    wait_for(lambda: feeder.sent > 500, 30, "some traffic")
    j.signal(["p2"], signal.SIGSTOP)
    try:
        j.signal(["p1"], signal.SIGTERM)
        wait_for(lambda: "asked to stop: draining first" in j.processors["p1"].log(), 30,
                 "p1 draining")
        time.sleep(1)
        assert j.processors["p1"].running()
        second = time.monotonic()
        j.signal(["p1"], signal.SIGTERM)
        assert j.processors["p1"].wait(60) == 0
        assert time.monotonic() - second < 30       # released with a last commit, no drain
        assert "drained: no active task left" not in j.processors["p1"].log()
    finally:
        j.signal(["p2"], signal.SIGCONT)
    del j.processors["p1"]
    j.start_processor("p3")
    finish(j, feeder, broker)
