"""The heartbeat monitor's long poll: asked for only close to a handoff, with no
activation running and no reply being acted on (their end must be reported at once);
and a handoff coming close is reported at once, not at the next beat."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from orchestrator.wire.client import CoordinatorError
from orchestrator.wire.protocol import T1_ROLES, HeartbeatReply, TaskReport
from processor.daemon.heartbeat import HeartbeatMonitor
from tests.clocks import FakeClock


def monitor(tmp_path: Path, reports: list[TaskReport]) -> HeartbeatMonitor:
    return HeartbeatMonitor("http://127.0.0.1:9", tmp_path / "token", "p1", "e1",
                            interval_s=1.0, grace_s=10.0, snapshot=lambda: reports)


def report(role: str) -> TaskReport:
    return TaskReport.model_validate({"task": "Partition 0", "role": role, "committed"
                                      if role in T1_ROLES else "applied": {"in:0": 5}})


def test_a_long_poll_only_close_to_a_handoff_with_nothing_in_flight(tmp_path: Path) -> None:
    quiet = monitor(tmp_path, [report("warmup")])
    assert quiet._request(path="/processors/heartbeat").wait_ms is None
    quiet.fast = True
    assert quiet._request(path="/processors/heartbeat").wait_ms == 1000
    assert quiet._request(path="/processors/register").wait_ms is None
    assert quiet._request(leaving=True).wait_ms is None
    busy = monitor(tmp_path, [report("activating")])
    busy.fast = True
    assert busy._request(path="/processors/heartbeat").wait_ms is None


def test_no_long_poll_until_the_main_loop_has_acted_on_the_reply(tmp_path: Path) -> None:
    """A reply that says "release" is acted on by the main loop; a long poll sent before
    the release is published would hold its report back until the poll's bound."""
    hb = monitor(tmp_path, [report("active")])
    hb.fast = True
    hb._keep(HeartbeatReply(alive=True), hb._request())
    assert hb._request(path="/processors/heartbeat").wait_ms is None     # not yet taken
    assert hb.take_reply() is not None
    assert hb._request(path="/processors/heartbeat").wait_ms is None     # taken, not done
    hb._keep(HeartbeatReply(alive=True), hb._request())            # a newer one came meanwhile
    hb.settle()
    assert hb._request(path="/processors/heartbeat").wait_ms is None
    hb.take_reply()
    hb.settle()
    assert hb._request(path="/processors/heartbeat").wait_ms == 1000


def test_a_reply_comes_with_the_failures_its_heartbeat_reported(tmp_path: Path) -> None:
    """Those the coordinator has seen, which the main loop may forget once it no longer
    lists them (processor/lifecycle.py, `reply_plan`); a later failure it may not."""
    reports = [report("active")]
    hb = monitor(tmp_path, reports)
    hb._keep(HeartbeatReply(alive=True), hb._request())
    assert hb.take_reply() == (HeartbeatReply(alive=True), frozenset())
    reports[0] = TaskReport(task="Partition 0", role="failed", error="fenced")
    hb._keep(HeartbeatReply(alive=True), hb._request())
    assert hb.take_reply() == (HeartbeatReply(alive=True), frozenset({"Partition 0"}))


def test_a_handoff_coming_close_is_reported_at_once_not_at_the_next_beat(tmp_path: Path
                                                                         ) -> None:
    """A warmup that has just caught up turns `fast` on: the coordinator starts the
    handoff on that report, so it goes out now, not a heartbeat_interval_ms later."""
    sent: list[float] = []

    def post(path: str, request: object) -> HeartbeatReply:
        sent.append(time.monotonic())
        return HeartbeatReply(alive=True)

    hb = HeartbeatMonitor("http://127.0.0.1:9", tmp_path / "token", "p1", "e1",
                          interval_s=30.0, grace_s=60.0, snapshot=lambda: [report("warmup")])
    hb._post = post                     # type: ignore[method-assign]
    hb.start()
    try:
        assert hb.registered.wait(10)
        time.sleep(0.3)
        assert len(sent) == 1           # the next beat is 30 s away
        hb.fast = False                 # not close to a handoff: still nothing
        time.sleep(0.3)
        assert len(sent) == 1
        turned = time.monotonic()
        hb.fast = True
        while len(sent) < 2 and time.monotonic() - turned < 10:
            time.sleep(0.01)
        assert len(sent) >= 2 and sent[1] - turned < 1.0
    finally:
        hb.stopping.set()
        hb.poke()
        hb.join(10)


def test_a_flapping_handoff_signal_heartbeats_at_most_once_a_fast_interval(tmp_path: Path
                                                                          ) -> None:
    """A warmup's lag hovering at acceptable_lag turns `fast` on and off every round:
    one extra heartbeat per fast interval, not one per round."""
    clock = FakeClock()
    hb = HeartbeatMonitor("http://127.0.0.1:9", tmp_path / "token", "p1", "e1",
                          interval_s=1.0, grace_s=10.0, snapshot=lambda: [], clock=clock)
    pokes = 0
    for _ in range(10):                 # ten loop rounds, 2 ms apart
        hb.fast = True
        pokes += hb._poked.is_set()
        hb._poked.clear()
        hb.fast = False
        clock.advance(0.002)
    assert pokes == 1
    clock.advance(0.025)
    hb.fast = True
    assert hb._poked.is_set()


def test_a_long_poll_answered_with_news_is_followed_by_the_report_of_what_was_done(
        tmp_path: Path) -> None:
    """A long poll that waited was answered with news (a release): the next heartbeat
    goes out when the main loop has acted on it (settle), not at once with the state
    before it, whose round trip the report of the release then waited out."""
    clock = FakeClock()
    hb = HeartbeatMonitor("http://127.0.0.1:9", tmp_path / "token", "p1", "e1",
                          interval_s=1.0, grace_s=10.0, snapshot=lambda: [report("active")],
                          clock=clock)
    hb.fast = True
    hb._poked.clear()
    request = hb._request(path="/processors/heartbeat")
    assert request.wait_ms == 1000
    started = clock.monotonic()
    clock.advance(0.2)                          # the poll waited: its answer is news
    hb._keep(HeartbeatReply(alive=True), hb._request())
    assert hb._next_wait(request, started) == 1.0       # held for the main loop...
    assert not hb._poked.is_set()
    assert hb.take_reply() is not None
    hb.settle()
    assert hb._poked.is_set()                           # ...and sent once it has acted
    hb._poked.clear()
    hb._awaiting_settle = False                 # what run() does after the wait
    hb._keep(HeartbeatReply(alive=True), hb._request())        # acted on before the poll returned:
    hb.take_reply()
    hb.settle()
    assert not hb._poked.is_set()               # no extra beat for it
    assert hb._next_wait(request, started) == 0.0       # and the next goes at once
    quick = hb._request(path="/processors/heartbeat")
    assert hb._next_wait(quick, clock.monotonic()) == 0.025     # a poll answered at once


def test_an_unanswered_heartbeat_is_retried_at_the_regular_interval_and_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A coordinator that answers 503 while a handoff is close at hand: the monitor
    knocks once a heartbeat_interval_ms (not every fast interval, and pokes do not cut
    the wait short), and writes one warning for the outage, not one a beat."""
    sent: list[float] = []

    def post(path: str, request: object) -> HeartbeatReply:
        sent.append(time.monotonic())
        raise CoordinatorError("answered /processors/heartbeat with HTTP 503: standby", 503)

    hb = HeartbeatMonitor("http://127.0.0.1:9", tmp_path / "token", "p1", "e1",
                          interval_s=0.2, grace_s=60.0, snapshot=lambda: [report("active")])
    hb._post = post                     # type: ignore[method-assign]
    hb.fast = True
    caplog.set_level(logging.WARNING, logger="baton.processor.heartbeat")
    hb.start()
    try:
        for _ in range(50):             # the main loop pokes on every role change
            hb.poke()
            time.sleep(0.02)
    finally:
        hb.stopping.set()
        hb.join(10)
    assert 3 <= len(sent) <= 7, len(sent)       # ~1 s at 0.2 s, not ~40 at 0.025 s
    assert min(b - a for a, b in zip(sent, sent[1:], strict=False)) >= 0.15
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failed) == 1, [r.getMessage() for r in failed]


def test_a_main_loop_that_no_longer_comes_round_stops_the_processor(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Heartbeats alone would say all is well while a loop stuck in a call held its
    tasks for good: past loop_timeout_s the monitor stops the processor."""
    clock = FakeClock()
    hb = HeartbeatMonitor("http://127.0.0.1:9", tmp_path / "token", "p1", "e1",
                          interval_s=1.0, grace_s=10.0, snapshot=lambda: [], clock=clock,
                          loop_timeout_s=5.0)
    hb.stopping.set()           # the main loop's answer to dead: no hard exit in a test
    clock.advance(4.0)
    hb.loop_came_round()
    clock.advance(5.0)
    assert not hb._loop_stuck() and not hb.dead.is_set()
    clock.advance(0.5)
    with caplog.at_level(logging.ERROR, logger="baton.processor.heartbeat"):
        assert hb._loop_stuck() and hb.dead.is_set()
    assert "main loop has not come round for 6s" in hb.dead_reason
    # where the loop's thread (here the test's own) was: the call that never returned
    assert "the main loop is stuck here" in caplog.text
    assert "test_a_main_loop_that_no_longer_comes_round_stops_the_processor" in caplog.text
    ended = HeartbeatMonitor("http://127.0.0.1:9", tmp_path / "token", "p1", "e1",
                             interval_s=1.0, grace_s=10.0, snapshot=lambda: [], clock=clock,
                             loop_timeout_s=5.0)
    ended.loop_ended()          # a graceful stop takes as long as it needs
    clock.advance(3600.0)
    assert not ended._loop_stuck()
