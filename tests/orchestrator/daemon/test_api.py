"""The coordinator's HTTP API over a real core with in-memory persistence and a fake
admin: the token, the pinned endpoints, 4xx (never 5xx) on malformed requests, and a
schemathesis fuzz of the whole OpenAPI description."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from prometheus_client import CollectorRegistry

from metrics import CoordinatorMetrics
from orchestrator.core.coordinator import Coordinator, CoreConfig
from orchestrator.core.model import JobModel
from orchestrator.daemon.api import create_app
from orchestrator.daemon.credentials import Credentials, Refused
from orchestrator.daemon.limits import BodyLimit
from orchestrator.daemon.service import CoordinatorService
from orchestrator.kafka.topics import TopicsError, Watermarks
from tests.clocks import FakeClock

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROCESSOR_TOKEN = "processor-token-0123456789"
PROCESSOR_AUTH = {"Authorization": f"Bearer {PROCESSOR_TOKEN}"}


def credentials(operator: str = TOKEN, processor: str | None = None,
                grace_s: float = 60.0, clock: Any = None) -> Credentials:
    """Credentials over 0600 token files in a fresh directory."""
    folder = Path(tempfile.mkdtemp(prefix="baton-tokens-"))
    atexit.register(shutil.rmtree, folder, True)
    paths = []
    for name, token in (("operator", operator), ("processor", processor)):
        if token is None:
            paths.append(None)
            continue
        path = folder / f"{name}.token"
        path.write_text(token + "\n")
        path.chmod(0o600)
        paths.append(path)
    assert paths[0] is not None
    return Credentials(paths[0], paths[1], grace_s, **({"clock": clock} if clock else {}))


class FakeAdmin:
    """Partition counts and offsets in memory; create_partitions grows them."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = dict(counts)
        self.created: list[tuple[str, int]] = []

    def partition_counts(self, topics: Sequence[str]) -> dict[str, int]:
        missing = [t for t in topics if t not in self.counts]
        if missing:
            raise TopicsError(f"input topic {missing[0]!r} does not exist")
        return {t: self.counts[t] for t in topics}

    def watermarks(self, partitions: Iterable[str]) -> dict[str, Watermarks]:
        return {p: Watermarks(0, 100 + int(p.rsplit(":", 1)[1])) for p in partitions}

    def committed(self, partitions: Iterable[str]) -> dict[str, int]:
        return {}

    def create_partitions(self, topic: str, count: int) -> None:
        if count < self.counts[topic]:
            raise TopicsError(f"cannot shrink {topic}")
        self.created.append((topic, count))
        self.counts[topic] = count


def make_service() -> tuple[CoordinatorService, CollectorRegistry, dict[str, Any]]:
    registry = CollectorRegistry()
    core = Coordinator(CoreConfig(job="j"), FakeClock(), JobModel.first([("in", 2)], "partition"),
                       CoordinatorMetrics(registry, "j"))
    written: dict[str, Any] = {}

    def persist(changes: Any) -> None:
        written.update(changes)

    service = CoordinatorService(core, persist, FakeAdmin({"in": 2}), ["in"],
                                 {"coordinator": {"url": "http://x", "metrics_url": "http://x/metrics"}})
    service.guard.commit()
    return service, registry, written


@pytest.fixture
def api() -> tuple[TestClient, dict[str, Any]]:
    service, registry, written = make_service()
    return TestClient(create_app(service, credentials(), registry)), written


def beat(execution: str = "e1", pid: str = "p1", **extra: Any) -> dict[str, Any]:
    return {"processor_id": pid, "execution_id": execution, **extra}


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/status"), ("POST", "/processors/register"), ("POST", "/processors/heartbeat"),
    ("POST", "/plan"), ("POST", "/drain"), ("POST", "/forget"), ("POST", "/expand"),
    ("POST", "/split"), ("POST", "/autoscale/decisions"), ("GET", "/openapi.json")])
def test_token_required(api: tuple[TestClient, Any], method: str, path: str) -> None:
    client, _ = api
    assert client.request(method, path).status_code == 401
    wrong = client.request(method, path, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.headers["www-authenticate"] == "Bearer"
    assert TOKEN not in wrong.text


def test_container_heartbeat_and_metrics_need_no_token(api: tuple[TestClient, Any]) -> None:
    client, _ = api
    assert client.get("/containerHeartbeat", params={"executionContainerId": "e1"}).json() == {
        "alive": False}
    assert client.post("/processors/register", json=beat(), headers=AUTH).json()["alive"]
    assert client.get("/containerHeartbeat", params={"executionContainerId": "e1"}).json() == {
        "alive": True}
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert "baton_invalid_heartbeats_total" in metrics.text


def test_register_heartbeat_and_replacement(api: tuple[TestClient, Any]) -> None:
    client, written = api
    reply = client.post("/processors/register", json=beat(), headers=AUTH).json()
    assert reply["alive"] and reply["generation"] == 1
    assert sorted(reply["assignment"]["active"]) == ["Partition 0", "Partition 1"]
    assert written["processor/p1"]["execution_id"] == "e1"
    client.post("/processors/register", json=beat("e2"), headers=AUTH)
    assert not client.post("/processors/heartbeat", json=beat("e1"), headers=AUTH).json()["alive"]
    assert client.get("/containerHeartbeat",
                      params={"executionContainerId": "e1"}).json() == {"alive": False}
    metrics = client.get("/metrics").text
    assert 'baton_invalid_heartbeats_total{job="j"} 1.0' in metrics


def test_autoscale_decisions_are_counted_and_shown(api: tuple[TestClient, Any]) -> None:
    client, _ = api
    decision = {"direction": "down", "outcome": "started", "current": 3, "target": 2,
                "processors": ["auto-2"], "reason": "fewer needed",
                "inputs": {"demand": 120.5, "lag": 4, "expand": False}}
    assert client.post("/autoscale/decisions", json=decision, headers=AUTH).json()[
        "recorded"]
    client.post("/autoscale/decisions", json={**decision, "outcome": "done"}, headers=AUTH)
    shown = client.get("/status", headers=AUTH).json()["autoscale_decisions"]
    assert [d["outcome"] for d in shown] == ["started", "done"]
    assert shown[0]["inputs"] == decision["inputs"] and shown[0]["at"] > 0
    metrics = client.get("/metrics").text
    assert ('baton_autoscale_decisions_total{direction="down",job="j",outcome="started"} 1.0'
            in metrics)
    assert 'baton_autoscale_decisions_total{direction="up",job="j",outcome="failed"} 0.0' in metrics
    bad = client.post("/autoscale/decisions", json={**decision, "direction": "sideways"},
                      headers=AUTH)
    assert bad.status_code == 422


def test_status_has_the_pinned_keys(api: tuple[TestClient, Any]) -> None:
    client, _ = api
    client.post("/processors/register", json=beat(metrics_url="http://127.0.0.1:9/metrics"),
                headers=AUTH)
    status = client.get("/status", headers=AUTH).json()
    assert isinstance(status["generation"], int)
    assert set(status["processors"][0]) >= {"id", "alive", "metrics_url", "active", "warmup",
                                            "standby"}
    assert status["processors"][0]["metrics_url"] == "http://127.0.0.1:9/metrics"
    assert set(status["tasks"][0]) >= {"name", "partitions", "active", "lag"}
    assert status["handoffs"] == []
    assert status["coordinator"]["metrics_url"] == "http://x/metrics"
    assert "balanced" in status and "pending" in status


@pytest.mark.parametrize(("path", "body"), [
    ("/processors/heartbeat", b"{not json"),
    ("/processors/heartbeat", b"[]"),
    ("/processors/heartbeat", b'{"processor_id": "p1"}'),
    ("/processors/heartbeat", b'{"processor_id": "p 1", "execution_id": "e"}'),
    ("/processors/heartbeat", b'{"processor_id": "p1", "execution_id": "e", "x": 1}'),
    ("/processors/register", b'{"processor_id": "p1", "execution_id": "e", "tasks": [{}]}'),
    ("/plan", b'{"add": "p2"}'),
    ("/plan", b'{"add": ["bad id"]}'),
    ("/drain", b"{}"),
    ("/forget", b"{}"),
    ("/forget", b'{"processor": "p/1"}'),
    ("/expand", b'{"topic": "in", "partitions": 0}'),
    ("/expand", b'{"topic": "in", "partitions": "many"}'),
    ("/expand", b'{"topic": "in", "partitions": 99999999999}'),
])
def test_malformed_requests_get_422(api: tuple[TestClient, Any], path: str, body: bytes) -> None:
    client, _ = api
    response = client.post(path, content=body,
                           headers={**AUTH, "Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["detail"]


def test_operator_refusals_are_4xx_with_reasons(api: tuple[TestClient, Any]) -> None:
    client, _ = api
    drain = client.post("/drain", json={"processor": "ghost"}, headers=AUTH)
    assert drain.status_code == 404 and "ghost" in drain.json()["detail"]
    forget = client.post("/forget", json={"processor": "ghost"}, headers=AUTH)
    assert forget.status_code == 404 and "ghost" in forget.json()["detail"]
    client.post("/processors/register", json=beat(), headers=AUTH)
    live = client.post("/forget", json={"processor": "p1"}, headers=AUTH)
    assert live.status_code == 409 and "'p1' is alive" in live.json()["detail"]
    plan = client.post("/plan", json={"remove": ["ghost"]}, headers=AUTH)
    assert plan.status_code == 400 and "ghost" in plan.json()["detail"]
    other = client.post("/expand", json={"topic": "other", "partitions": 4}, headers=AUTH)
    assert other.status_code == 400 and "not an input" in other.json()["detail"]
    odd = client.post("/expand", json={"topic": "in", "partitions": 3}, headers=AUTH)
    assert odd.status_code == 400 and "from 2 to 3" in odd.json()["detail"]
    shrink = client.post("/expand", json={"topic": "in", "partitions": 1}, headers=AUTH)
    assert shrink.status_code == 400


def test_expand_grows_and_records_barriers(api: tuple[TestClient, Any]) -> None:
    client, written = api
    result = client.post("/expand", json={"topic": "in", "partitions": 4}, headers=AUTH).json()
    assert result["generation"] == 2
    assert result["barriers"] == {"in:2": {"parent": "in:0", "offset": 100},
                                  "in:3": {"parent": "in:1", "offset": 101}}
    assert written["model"]["generation"] == 2
    status = client.get("/status", headers=AUTH).json()
    assert status["tasks"][0]["partitions"] == ["in:0", "in:2"]


def test_plan_and_drain(api: tuple[TestClient, Any]) -> None:
    client, written = api
    client.post("/processors/register", json=beat(), headers=AUTH)
    plan = client.post("/plan", json={"add": ["p2"]}, headers=AUTH).json()
    assert len(plan["moves"]) == 1 and plan["moves"][0]["to"] == "p2"
    drained = client.post("/drain", json={"processor": "p1"}, headers=AUTH).json()
    assert drained["draining"]
    assert written["drain"] == {"processors": ["p1"]}


def test_forget_of_a_dead_processor_is_persisted_before_the_answer() -> None:
    service, registry, written = make_service()
    client = TestClient(create_app(service, credentials(), registry))
    client.post("/processors/register", json=beat(metrics_url="http://10.0.0.1:9101/metrics"),
                headers=AUTH)
    client.post("/processors/register", json=beat("e2", "p2"), headers=AUTH)
    service.guard.core.picture.clock.advance(11)     # past the processor timeout: p1 silent
    client.post("/processors/heartbeat", json=beat("e2", "p2"), headers=AUTH)
    service.decisions.tick()
    assert written["processor/p1"]["valid"] is False
    assert client.get("/sd").json() == []     # a dead processor is no target
    moving = client.post("/forget", json={"processor": "p1"}, headers=AUTH)
    assert moving.status_code == 409, "p2 is activating p1's tasks: their handoffs name p1"
    assert "a handoff in flight still names it" in moving.json()["detail"]
    active = [{"task": t, "role": "active", "positions": {}}
              for t in ("Partition 0", "Partition 1")]
    for _ in range(3):
        client.post("/processors/heartbeat", json=beat("e2", "p2", tasks=active), headers=AUTH)
        service.decisions.tick()
    forgot = client.post("/forget", json={"processor": "p1"}, headers=AUTH)
    assert forgot.status_code == 200 and forgot.json()["forgotten"] is True
    assert written["processor/p1"] is None and written["forgotten"] == {"p1": "e1"}
    assert registry.get_sample_value("baton_processors", {"job": "j", "state": "dead"}) == 0


# ---- schemathesis: fuzz every operation, with the token; no 5xx, ever ---------------------

_service, _registry, _ = make_service()
_app = create_app(_service, credentials(), _registry)
schema = schemathesis.openapi.from_asgi("/openapi.json", _app, headers=AUTH)


@schema.parametrize()
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_fuzz_never_5xx(case: Any) -> None:
    response = case.call(headers=AUTH)
    assert response.status_code < 500, (case.method, case.path, response.text)


def test_split_after_expand_is_recorded_once(api: tuple[TestClient, Any]) -> None:
    client, written = api
    assert client.post("/split", json={}, headers=AUTH).json()["splits"] == []
    assert client.post("/expand", json={"topic": "in", "partitions": 4}, headers=AUTH).is_success
    planned = client.post("/split", json={"dry_run": True}, headers=AUTH).json()
    assert planned["tasks"] == 4 and not planned["recorded"]
    assert [s["child"] for s in planned["splits"]] == ["Partition 2", "Partition 3"]
    assert written["model"]["pending"] == {}
    done = client.post("/split", json={}, headers=AUTH).json()
    assert done["recorded"] and done["splits"] == planned["splits"]
    assert written["model"]["pending"] == {"Partition 2": "Partition 0",
                                           "Partition 3": "Partition 1"}
    status = client.get("/status", headers=AUTH).json()
    assert [t["name"] for t in status["tasks"]] == [f"Partition {i}" for i in range(4)]
    assert status["tasks"][2]["split_from"] == "Partition 0"
    again = client.post("/split", json={}, headers=AUTH).json()
    assert again["splits"] == [] and again["tasks"] == 4


def test_split_refusals_are_400_with_reasons() -> None:
    registry = CollectorRegistry()
    for config, model, why in [
            (CoreConfig(job="j"), JobModel.first([("in", 2)], "single"), "'single'"),
            (CoreConfig(job="j", catch_up_source="changelog"),
             JobModel.first([("in", 2)], "partition"), "changelog")]:
        core = Coordinator(config, FakeClock(), model, CoordinatorMetrics(registry, "j"))
        service = CoordinatorService(core, lambda changes: None, FakeAdmin({"in": 2}), ["in"])
        client = TestClient(create_app(service, credentials(), None))
        refused = client.post("/split", json={}, headers=AUTH)
        assert refused.status_code == 400 and why in refused.json()["detail"], refused.text
        registry = CollectorRegistry()


def test_plan_accounts_for_split_children(api: tuple[TestClient, Any]) -> None:
    """`baton plan --add` moves the children off their parent's owner, each counting its
    parent partition up to the barrier, then its own partition."""
    client, _ = api
    assert client.post("/processors/register", json=beat(), headers=AUTH).json()["alive"]
    assert client.post("/expand", json={"topic": "in", "partitions": 4}, headers=AUTH).is_success
    assert client.post("/split", json={}, headers=AUTH).json()["recorded"]
    # p1 consumes its parents and, embedded in them, the children's partitions
    reports = [{"task": "Partition 0", "role": "active",
                "positions": {"in:0": 130, "in:2": 50}},
               {"task": "Partition 1", "role": "active",
                "positions": {"in:1": 80, "in:3": 60}}]
    assert client.post("/processors/heartbeat", json=beat(tasks=reports),
                       headers=AUTH).json()["alive"]
    plan = client.post("/plan", json={"add": ["p2"]}, headers=AUTH).json()
    moved = {m["task"]: m for m in plan["moves"]}
    assert moved, plan
    children = {t: m for t, m in moved.items() if t in ("Partition 2", "Partition 3")}
    assert children, plan       # the children, placed like ownerless tasks, go to p2
    for task, move in children.items():
        assert move["from"] == "p1" and move["to"] == "p2"
        # the parent partition up to min(T1, barrier), then the child's own up to T1:
        # Partition 2: in:0 min(130, 100) + in:2 50; Partition 3: in:1 min(80, 101) + 60
        assert move["records"] == {"Partition 2": 150, "Partition 3": 140}[task], move


# ---- credentials, bounds ---------------------------------------------------------------------

@pytest.fixture
def two_tokens() -> TestClient:
    service, registry, _ = make_service()
    return TestClient(create_app(service, credentials(processor=PROCESSOR_TOKEN), registry))


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/status", None), ("POST", "/plan", {"add": ["p2"]}),
    ("POST", "/drain", {"processor": "p1"}), ("POST", "/expand", {"topic": "in", "partitions": 4}),
    ("POST", "/split", {}), ("GET", "/openapi.json", None),
    ("POST", "/autoscale/decisions", {"direction": "up", "outcome": "started", "current": 1,
                                      "target": 2})])
def test_a_processor_token_cannot_call_operator_endpoints(two_tokens: TestClient, method: str,
                                                          path: str, body: Any) -> None:
    refused = two_tokens.request(method, path, json=body, headers=PROCESSOR_AUTH)
    assert refused.status_code == 403 and "processor token" in refused.json()["detail"]
    # the operator token passes authentication (a drain of an unknown processor is a 404)
    assert two_tokens.request(method, path, json=body, headers=AUTH).status_code not in (401, 403)


@pytest.mark.parametrize("path", ["/processors/register", "/processors/heartbeat"])
def test_an_operator_token_cannot_act_as_a_processor(two_tokens: TestClient, path: str) -> None:
    refused = two_tokens.post(path, json=beat(), headers=AUTH)
    assert refused.status_code == 403 and "operator token" in refused.json()["detail"]
    wrong = two_tokens.post(path, json=beat(), headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert two_tokens.post("/processors/register", json=beat(),
                           headers=PROCESSOR_AUTH).json()["alive"]


def test_one_token_serves_both_kinds_when_no_processor_token_is_set(
        api: tuple[TestClient, Any]) -> None:
    client, _ = api
    assert client.post("/processors/register", json=beat(), headers=AUTH).json()["alive"]
    assert client.get("/status", headers=AUTH).status_code == 200


def test_reports_must_name_tasks_and_partitions_of_the_job(api: tuple[TestClient, Any]) -> None:
    client, _ = api
    unknown = client.post("/processors/register", headers=AUTH, json=beat(
        tasks=[{"task": "Partition 9", "role": "active", "positions": {"in:0": 1}}]))
    assert unknown.status_code == 422 and "'Partition 9'" in unknown.json()["detail"]
    stray = client.post("/processors/register", headers=AUTH, json=beat(
        tasks=[{"task": "Partition 0", "role": "active", "positions": {"other:7": 1}}]))
    assert stray.status_code == 422 and "'other:7'" in stray.json()["detail"]
    ok = client.post("/processors/register", headers=AUTH, json=beat(
        tasks=[{"task": "Partition 0", "role": "warmup", "positions": {"in:0": 1}}]))
    assert ok.status_code == 200


def test_oversized_bodies_get_413_before_parsing() -> None:
    service, registry, _ = make_service()
    client = TestClient(BodyLimit(create_app(service, credentials(), registry), 4096))
    big = beat(metrics_url="x" * 400,
               tasks=[{"task": "Partition 0", "role": "active"}] * 200)
    refused = client.post("/processors/heartbeat", json=big, headers=AUTH)
    assert refused.status_code == 413 and "max_request_bytes" in refused.json()["detail"]
    chunked = client.post("/processors/heartbeat", headers={**AUTH, "content-type":
                                                             "application/json"},
                          content=iter([b"[" * 3000, b"]" * 3000]))
    assert chunked.status_code == 413
    assert client.post("/processors/register", json=beat(), headers=AUTH).status_code == 200


def test_a_replaced_token_works_for_the_grace_then_stops() -> None:
    now = [100.0]
    creds = credentials(grace_s=30.0, clock=lambda: now[0])
    creds.check("operator", TOKEN)
    creds.files["operator"].write_text("new-token-0123456789\n")
    assert creds.reload() == ["operator"]
    creds.check("operator", "new-token-0123456789")
    creds.check("operator", TOKEN)              # the old one, within the grace
    now[0] += 31
    with pytest.raises(Refused) as refused:
        creds.check("operator", TOKEN)
    assert refused.value.status == 401
    creds.check("operator", "new-token-0123456789")
    assert creds.reload() == []


_two_service, _two_registry, _ = make_service()
_two_app = create_app(_two_service, credentials(processor=PROCESSOR_TOKEN), _two_registry)
two_token_schema = schemathesis.openapi.from_asgi("/openapi.json", _two_app, headers=AUTH)


@two_token_schema.parametrize()
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@pytest.mark.parametrize("auth", [AUTH, PROCESSOR_AUTH], ids=["operator", "processor"])
def test_fuzz_never_5xx_with_either_token(case: Any, auth: dict[str, str]) -> None:
    response = case.call(headers=auth)
    assert response.status_code < 500, (case.method, case.path, response.text)
