"""The processor's probes over plain numbers (processor/daemon/health.py)."""

from __future__ import annotations

from orchestrator.wire.health import Probe
from processor.daemon.health import live, ready


def test_live_while_the_loop_came_round_within_half_its_timeout() -> None:
    assert live(0.0, 120.0).ok
    assert live(60.0, 120.0).ok
    stuck = live(61.0, 120.0)
    assert stuck == Probe(False, "the main loop has not come round for 61s (half of "
                                 "processor.loop_timeout_ms is 60s)")
    assert stuck.status == 503 and live(1.0, 120.0).status == 200


def test_ready_once_registered_and_heard_within_the_grace() -> None:
    assert not ready(False, float("inf"), 15.0, False).ok
    assert ready(True, 3.0, 15.0, False) == Probe(True, "registered, and heard by the "
                                                        "coordinator")
    unheard = ready(True, 16.0, 15.0, False)
    assert not unheard.ok and "tasks keep processing" in unheard.detail
    assert ready(True, 0.0, 15.0, True).detail.startswith("the coordinator declared")


def test_the_answer_is_json_with_no_more_than_it_says() -> None:
    assert Probe(True, "leading").body() == b'{"ok": true, "detail": "leading"}'
