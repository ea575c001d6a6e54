"""A standby checks the bearer token before it says it is not the leader, so a
coordinator holding another token shows before a failover (`baton check`)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from orchestrator.daemon.credentials import Credentials
from orchestrator.daemon.gate import Gate
from orchestrator.daemon.standby_tokens import StandbyTokenCheck
from orchestrator.wire.tls import TlsSettings
from orchestrator.wire.token import read_token, write_token


def _standby(tmp_path: Path) -> tuple[TestClient, str, str]:
    operators, processors = tmp_path / "operator.token", tmp_path / "processor.token"
    write_token(operators)
    write_token(processors)
    gate = Gate("orders", CollectorRegistry(), TlsSettings(None, None, None))
    gate.leader_url = "https://198.18.52.11:8700"
    check = StandbyTokenCheck(gate, Credentials(operators, processors, 60))
    return TestClient(check), read_token(operators), read_token(processors)


def test_a_standby_refuses_a_wrong_token_and_names_the_file(tmp_path: Path) -> None:
    client, _, _ = _standby(tmp_path)
    for headers in ({}, {"Authorization": "Bearer another-coordinators-token"},
                    {"Authorization": "Basic abc"}):
        answer = client.get("/status", headers=headers)
        assert answer.status_code == 401, headers
        assert answer.headers["www-authenticate"] == "Bearer"
        assert "coordinator.token_file" in answer.json()["detail"]
    assert client.post("/processors/heartbeat", json={}).status_code == 401


def test_a_standby_with_either_right_token_says_where_the_leader_is(tmp_path: Path) -> None:
    client, operators, processors = _standby(tmp_path)
    status = client.get("/status", headers={"Authorization": f"Bearer {operators}"})
    assert status.status_code == 503 and status.json()["standby"] is True
    assert status.json()["leader"] == "https://198.18.52.11:8700"
    beat = client.post("/processors/heartbeat", json={},
                       headers={"Authorization": f"Bearer {processors}"})
    assert beat.status_code == 503


def test_the_open_endpoints_stay_open_on_a_standby(tmp_path: Path) -> None:
    client, _, _ = _standby(tmp_path)
    assert client.get("/metrics").status_code == 200
    assert client.get("/sd").status_code != 401
