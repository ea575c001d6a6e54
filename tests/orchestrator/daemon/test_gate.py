"""The coordinator's front door, on its own: what it answers while the daemon stops."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from orchestrator.daemon.gate import Gate
from orchestrator.wire.tls import TlsSettings


class _Leader:
    """The leader's API: answers 200 and counts what reached it."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        self.paths.append(scope["path"])
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}"})


def _gate() -> tuple[Gate, _Leader]:
    gate, leader = Gate("orders", CollectorRegistry(), TlsSettings(None, None, None)), _Leader()
    gate.app = leader
    return gate, leader


def test_a_leading_gate_passes_requests_to_the_leader() -> None:
    gate, leader = _gate()
    answer = TestClient(gate).post("/processors/heartbeat", json={})
    assert answer.status_code == 200 and leader.paths == ["/processors/heartbeat"]


def test_a_stopping_coordinator_sends_clients_elsewhere() -> None:
    gate, leader = _gate()
    gate.stopping = True
    client = TestClient(gate)
    for answer in (client.post("/processors/heartbeat", json={}),
                   client.post("/processors/register", json={}), client.get("/status")):
        assert answer.status_code == 503
        body = answer.json()
        assert body["standby"] is True and body["leader"] is None
        assert body["detail"].startswith("standby coordinator of job orders: it is stopping")
    # read-only answers go on: metrics, and the pinned liveness probe's {"alive": ...}
    assert client.get("/metrics").status_code == 200
    assert client.get("/containerHeartbeat?executionContainerId=x").status_code == 200
    assert leader.paths == ["/metrics", "/containerHeartbeat"]


def test_a_standby_answers_sd_from_the_stream_it_follows() -> None:
    gate = Gate("orders", CollectorRegistry(), TlsSettings(None, None, None))
    client = TestClient(gate)
    assert client.get("/sd").status_code == 503, "nothing read from the stream yet"
    groups = [{"targets": ["10.0.0.1:9101"], "labels": {"job": "orders", "processor": "p1"}}]
    gate.sd = groups
    answer = client.get("/sd")       # no token: as /metrics
    assert answer.status_code == 200 and answer.json() == groups
    assert client.get("/status").status_code == 503, "control requests still go to the leader"


def test_a_leading_gate_leaves_sd_to_the_leader_s_api() -> None:
    gate, leader = _gate()
    gate.sd = []
    assert TestClient(gate).get("/sd").status_code == 200 and leader.paths == ["/sd"]
