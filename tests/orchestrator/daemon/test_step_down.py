"""A deposed leader stands by, whatever its abandoned leadership does on close: the
daemon in-process against the shared broker, deposed by a second writer of its stream."""

from __future__ import annotations

import gc
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from orchestrator.daemon.main import CoordinatorDaemon
from orchestrator.kafka.stream import CoordinatorStream, FencedError
from orchestrator.wire.clock import SystemClock

pytestmark = pytest.mark.integration

NEW_LEADER = "http://127.0.0.1:9"


@pytest.fixture
def leading(coordinated: Callable[..., tuple[Any, Any]]) -> Iterator[CoordinatorDaemon]:
    config, _ = coordinated()
    daemon = CoordinatorDaemon(config, SystemClock(), threading.Event())
    try:
        daemon._first_turn()
        assert daemon.lead is not None, "a fresh job's first coordinator leads"
        yield daemon
    finally:
        daemon.close()


def _depose(daemon: CoordinatorDaemon, **records: Any) -> None:
    """Another coordinator takes the stream over and names itself (and writes
    `records`)."""
    usurper = CoordinatorStream(daemon.config.kafka_settings(), daemon.config.job.name)
    try:
        usurper.open()
        usurper.write({"leader": {"url": NEW_LEADER}, **records})
    finally:
        usurper.close()


def _fail_on_close() -> None:
    raise RuntimeError("close failed")


def test_a_deposed_leader_names_the_new_one(leading: CoordinatorDaemon) -> None:
    _depose(leading)
    lead = leading.lead
    assert lead is not None
    with pytest.raises(FencedError):
        lead.service.guard.keepalive(lead.identity())
    leading._step_down()
    assert leading.lead is None and leading.gate.app is None
    # the new leader's record is readable (read_committed) once its transaction's
    # markers are written, which the broker does after the commit returned: the standby
    # names it from the turn whose read reaches it, and keeps following the stream
    deadline = time.monotonic() + 30
    while leading.gate.leader_url != NEW_LEADER and time.monotonic() < deadline:
        time.sleep(0.1)
        leading._standby_turn()
    assert leading.lead is None and leading.gate.leader_url == NEW_LEADER
    leading._standby_turn()
    assert leading.lead is None and leading.gate.leader_url == NEW_LEADER


def test_a_deposed_leader_drops_the_job_s_picture_and_answers_sd_from_the_stream(
        leading: CoordinatorDaemon) -> None:
    registry = leading.registry

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"job": leading.config.job.name, **labels})

    leading.metrics.set_processors({"alive": 2, "dead": 1})     # the leader's picture
    leading.metrics.set_failed_tasks(1)
    p2 = {"execution_id": "e2", "metrics_url": "http://10.0.0.2:9102/metrics", "valid": True}
    _depose(leading, **{"processor/p2": p2})
    leading._step_down()
    for state in ("alive", "draining", "dead"):
        assert sample("baton_processors", state=state) == 0, state
    assert sample("baton_tasks_failed") == 0 and sample("baton_coordinator_leader") == 0
    assert leading.gate.sd == [{"targets": ["10.0.0.2:9102"], "labels": {
        "job": leading.config.job.name, "processor": "p2"}}]


def test_a_leadership_that_fails_to_close_still_stands_by(
        leading: CoordinatorDaemon, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    _depose(leading)
    assert leading.lead is not None
    monkeypatch.setattr(leading.lead, "close", _fail_on_close)
    leading._step_down()
    assert leading.lead is None and leading.gate.leader_url == NEW_LEADER
    assert "close failed" in caplog.text, "the failure is logged with its traceback"


def test_a_stopping_leader_refuses_requests_before_it_closes_its_stream(
        leading: CoordinatorDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """A processor's goodbye that came in while the stream closed failed with "write
    before open()" (an ERROR in the coordinator's log, a 503 naming nothing the operator
    could act on): the gate refuses from the stop's first step instead."""
    lead = leading.lead
    assert lead is not None and not leading.gate.stopping
    seen: list[bool] = []
    close = lead.close
    monkeypatch.setattr(lead, "close", lambda: (seen.append(leading.gate.stopping), close()))
    leading.close()
    assert seen == [True]


def test_a_deposed_leaderships_stream_producer_goes_with_it(
        leading: CoordinatorDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fenced producer's client (its threads and sockets) goes when the leadership
    is abandoned, by reference counting alone: the daemon's collector frees cycles only
    every ten minutes (orchestrator/wire/collector.py), and a coordinator deposed at each
    broker restart kept one more client each time."""
    lead = leading.lead
    assert lead is not None
    producer = weakref.ref(lead.stream._producer)
    del lead
    _depose(leading)
    # pytest's log capture keeps each record, and the "deposed" one holds the error
    monkeypatch.setattr(logging.getLogger("baton.coordinator"), "propagate", False)
    gc.disable()
    try:
        deadline = time.monotonic() + 30
        while leading.lead is not None and time.monotonic() < deadline:
            leading._leader_turn(leading.lead)      # writes, is fenced, stands by
        assert leading.lead is None, "deposed within 30 s"
        assert producer() is None, _holders(producer())
    finally:
        gc.enable()


def _holders(obj: object) -> str:
    """What still holds `obj`, for the failure message."""
    return "; ".join(f"{type(r).__name__}: {r!r:.200}" for r in gc.get_referrers(obj))
