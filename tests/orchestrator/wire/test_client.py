"""The coordinator client through a failover, at the httpx seam: two coordinators
answering from a handler (a refused connection, a standby's 503, a leader's 200), time
on a fake clock, so every retry, sleep and deadline is checked without waiting."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest
from tenacity import stop_after_attempt

from orchestrator.wire.client import (
    CLI_LIMIT_S,
    CoordinatorClient,
    CoordinatorError,
    CoordinatorUnreachable,
)
from orchestrator.wire.clock import Deadline
from orchestrator.wire.http import httpx
from tests.clocks import FakeClock

A, B = "http://127.0.0.1:8701", "http://127.0.0.1:8702"
Answer = Callable[[httpx.Request], httpx.Response]


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def standby(leader: str | None) -> Answer:
    def answer(request: httpx.Request) -> httpx.Response:
        where = f"the leader is at {leader}" if leader else "no leader is known yet"
        return httpx.Response(503, json={"detail": f"standby coordinator of job j: {where}",
                                         "standby": True, "leader": leader})
    return answer


def leads(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"generation": 7, "from": str(request.url.port)})


class Cluster:
    """Two coordinators; `roles[url]` says how each answers now; every request is
    recorded with the fake time it was made at and its timeout."""

    def __init__(self, clock: FakeClock, a: Answer, b: Answer) -> None:
        self.clock = clock
        self.roles: dict[str, Answer] = {A: a, B: b}
        self.seen: list[tuple[float, str, float]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        origin = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        self.seen.append((self.clock.monotonic(), origin,
                          float(request.extensions["timeout"]["connect"])))
        return self.roles[origin](request)

    def client(self, deadline: Deadline | None = None, notices: list[str] | None = None,
               **more: Any) -> CoordinatorClient:
        def notify(message: str, waiting: bool) -> None:
            if notices is not None:
                notices.append(message if waiting else f"then: {message}")
        return CoordinatorClient([A, B], "token", transport=httpx.MockTransport(self.handler),
                                 deadline=deadline, notify=notify, clock=self.clock, **more)


def test_a_call_waits_through_the_takeover_and_goes_on_with_the_new_leader() -> None:
    clock = FakeClock()
    cluster = Cluster(clock, refused, standby(A))     # a SIGKILLed, b not leading yet
    notices: list[str] = []
    client = cluster.client(Deadline.after(clock, 180), notices)
    takeover = 4.0

    def b_takes_over(seconds: float) -> None:
        FakeClock.sleep(clock, seconds)
        if clock.monotonic() >= takeover:
            cluster.roles[B] = leads

    clock.sleep = b_takes_over                        # type: ignore[method-assign]
    assert client.status() == {"generation": 7, "from": "8702"}
    assert client.url == B
    assert takeover <= clock.monotonic() <= takeover + 1.0      # found within a second
    assert max(clock.slept) <= 1.0
    waiting = notices[0]
    assert waiting.startswith(f"no coordinator leads yet: coordinator at {B} answered "
                              f"/status with HTTP 503: standby coordinator of job j: the "
                              f"leader is at {A}")
    assert f"coordinator at {A} is unreachable (ConnectError" in waiting
    assert notices[-1] == f"then: coordinator at {B} answered /status as the leader"
    # the next call starts at the new leader
    cluster.seen.clear()
    client.status()
    assert [url for _, url, _ in cluster.seen] == [B]


def test_when_no_coordinator_leads_in_time_the_error_names_the_one_that_answered() -> None:
    clock = FakeClock()
    cluster = Cluster(clock, refused, standby(A))
    client = cluster.client(Deadline.after(clock, 20))
    with pytest.raises(CoordinatorUnreachable) as caught:
        client.status()
    message = str(caught.value)
    assert message.startswith(f"coordinator at {B} answered /status with HTTP 503: "
                              f"standby coordinator of job j: the leader is at {A}")
    assert f"coordinator at {A} answered" not in message
    assert f"coordinator at {A} is unreachable" in message
    assert "no coordinator answered as the leader (kept trying for 20 s)" in message
    assert 20 <= clock.monotonic() <= 21        # the deadline, not a fixed count of tries
    assert len({t for t, _, _ in cluster.seen}) > 10


def test_sleeps_and_request_timeouts_never_outlive_the_deadline() -> None:
    clock = FakeClock()
    cluster = Cluster(clock, refused, refused)
    client = cluster.client(Deadline.after(clock, 2.6))
    with pytest.raises(CoordinatorUnreachable, match="is 'baton coordinator' running"):
        client.status()
    assert sum(clock.slept) == pytest.approx(2.6)
    timeouts = [timeout for _, _, timeout in cluster.seen]
    assert timeouts[0] == 2.6 and min(timeouts) == 1.0     # the floor of a last try
    assert all(t <= 10.0 for t in timeouts)


def test_without_a_deadline_each_call_keeps_trying_for_the_default_limit() -> None:
    clock = FakeClock()
    cluster = Cluster(clock, refused, standby(None))
    client = cluster.client()
    for _ in range(2):                           # each call gets its own limit
        started = clock.monotonic()
        with pytest.raises(CoordinatorUnreachable, match="no leader is known yet"):
            client.status()
        assert CLI_LIMIT_S <= clock.monotonic() - started <= CLI_LIMIT_S + 1


def test_a_standby_hint_is_followed_within_one_try() -> None:
    clock = FakeClock()
    cluster = Cluster(clock, standby(B), leads)
    assert cluster.client(Deadline.after(clock, 10)).status()["from"] == "8702"
    assert [url for _, url, _ in cluster.seen] == [A, B] and clock.slept == []


def test_a_hint_outside_the_configured_urls_is_not_followed() -> None:
    clock = FakeClock()
    cluster = Cluster(clock, standby("http://127.0.0.1:9999"), refused)
    with pytest.raises(CoordinatorUnreachable):
        cluster.client(Deadline.after(clock, 3)).status()
    assert {url for _, url, _ in cluster.seen} == {A, B}


def test_a_refusal_surfaces_at_once_naming_the_coordinator_that_refused() -> None:
    clock = FakeClock()
    cluster = Cluster(clock, refused, lambda r: httpx.Response(
        404, json={"detail": "unknown processor 'ghost'"}))
    with pytest.raises(CoordinatorError) as caught:
        cluster.client(Deadline.after(clock, 60)).drain("ghost")
    assert caught.value.status == 404
    assert str(caught.value).startswith(f"coordinator at {B} refused POST /drain (HTTP 404)")
    assert clock.slept == []


def test_a_policy_of_its_own_is_kept_the_heartbeats_one_try() -> None:
    clock = FakeClock()
    cluster = Cluster(clock, refused, standby(A))
    with pytest.raises(CoordinatorUnreachable) as caught:
        cluster.client(retry={"stop": stop_after_attempt(1)}).status()
    assert "kept trying" not in str(caught.value)
    assert len(cluster.seen) == 2 and clock.slept == []
    assert {timeout for _, _, timeout in cluster.seen} == {10.0}


def test_a_5xx_that_is_not_json_is_retried_and_reported() -> None:
    clock = FakeClock()
    cluster = Cluster(clock, lambda r: httpx.Response(502, text="bad gateway"), refused)
    with pytest.raises(CoordinatorUnreachable, match=f"coordinator at {A} answered /status "
                                                     f"with HTTP 502: bad gateway"):
        cluster.client(Deadline.after(clock, 5)).status()


def test_calls_under_a_policy_of_its_own_leave_no_reference_cycles() -> None:
    """The heartbeat calls once a second: each call made reference cycles (a `Retrying`
    built per call; httpx's response bound to its stream, holding the request and the
    body), left to the garbage collector's rare full pass (orchestrator/wire/collector.py)."""
    clock = FakeClock()
    client = Cluster(clock, leads, refused).client(retry={"stop": stop_after_attempt(1)})
    client.status()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(20):
            client.status()
        gc.collect()
        cycles = len(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert cycles == 0, f"{cycles} objects in cycles after 20 calls"
