"""Prometheus HTTP service discovery against the real Prometheus: the coordinator's
`GET /sd` lists every live processor's metrics target, labelled `job` and `processor`;
a Prometheus configured with only the coordinator (static) and its `/sd` scrapes the
processors, on the fixed ports of `[processor] metrics_port = { p1 = ..., p2 = ... }`,
and drops one that leaves. Every daemon exports `baton_build_info` and process metrics.
A fixed port in use for a moment is bound once it frees; one that stays in use ends the
start with exit 1, which a supervisor restarts."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from metrics import baton_version
from orchestrator.devkit.embedded import free_port
from tests.orchestrator.test_e2e import Job
from tests.waiting import wait_for

if TYPE_CHECKING:
    from prometheus_harness import PrometheusServer

pytestmark = pytest.mark.integration


def test_sd_feeds_prometheus_fixed_ports_and_build_info(
        coordinated: Any, daemons: Any, prometheus_factory: Any) -> None:
    ports = {"p1": free_port(), "p2": free_port()}
    config, path = coordinated(partitions=2, processor={"metrics_port": ports})
    job = Job(config, path, daemons)
    job.start_coordinator()
    job.start_processor("p1")
    job.start_processor("p2")
    base = config.coordinator.urls[0]
    groups = _sd(base)      # no token: as /metrics
    assert sorted(groups, key=lambda g: g["labels"]["processor"]) == [
        {"targets": [f"127.0.0.1:{ports[pid]}"],
         "labels": {"job": config.job.name, "processor": pid}} for pid in ("p1", "p2")]

    prometheus: PrometheusServer = prometheus_factory(
        [base.removeprefix("http://")], job_name=config.job.name, http_sd=f"{base}/sd")
    info = prometheus.wait_for("baton_build_info", lambda r: len(r) == 3, timeout=60)
    assert {r["metric"]["version"] for r in info} == {baton_version()}
    assert {r["metric"].get("processor") for r in info} == {None, "p1", "p2"}
    memory = prometheus.wait_for('process_resident_memory_bytes{processor="p2"}',
                                 lambda r: len(r) == 1)
    assert float(memory[0]["value"][1]) > 10e6
    assert job.processors["p2"].stop() == 0
    wait_for(lambda: len(_sd(base)) == 1, 60, "p2 gone from /sd")
    wait_for(lambda: _scraped(prometheus) == {None, "p1"}, 60,
             "Prometheus scraping only the coordinator and p1")


def _sd(base: str) -> list[dict[str, Any]]:
    reply = httpx.get(f"{base}/sd", timeout=10)
    assert reply.status_code == 200, reply.text
    groups: list[dict[str, Any]] = reply.json()
    return groups


def _scraped(prometheus: PrometheusServer) -> set[str | None]:
    return {t["labels"].get("processor") for t in prometheus.api("targets")["activeTargets"]}


def _held() -> socket.socket:
    """A port another program listens on."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    return taken


def test_a_fixed_metrics_port_held_for_a_moment_is_bound_once_it_frees(
        coordinated: Any, daemons: Any) -> None:
    taken = _held()
    port = taken.getsockname()[1]
    try:
        config, path = coordinated(partitions=1, processor={"metrics_port": {"p1": port}})
        job = Job(config, path, daemons)
        job.start_coordinator()
        processor = job.start_processor("p1", registered=False)
        wait_for(lambda: "is in use; trying again" in processor.log()
                 or not processor.running(), 60, "p1 trying its port again")
        assert processor.running(), processor.log()
    finally:
        taken.close()
    wait_for(lambda: "p1" in job.holding(), 60, "p1 registered once its port freed")
    [p1] = job.status()["processors"]
    assert p1["metrics_url"] == f"http://127.0.0.1:{port}/metrics"
    assert httpx.get(p1["metrics_url"], timeout=10).status_code == 200
    assert job.processors["p1"].stop() == 0


def test_a_fixed_metrics_port_that_stays_in_use_exits_1_for_a_restart_naming_the_key(
        coordinated: Any, daemons: Any) -> None:
    with _held() as taken:
        port = taken.getsockname()[1]
        _, path = coordinated(partitions=1, processor={"metrics_port": {"p1": port},
                                                       "bind_timeout_ms": 2000})
        processor = daemons("p1", "processor", "-c", path, "--id", "p1")
        assert processor.wait(60) == 1      # systemd's Restart=on-failure starts it again
    log = processor.log()
    assert f"127.0.0.1:{port} (processor.metrics_host, processor.metrics_port" in log
    assert "still after processor.bind_timeout_ms; exit 1" in log
