"""Prometheus HTTP service discovery against the real Prometheus: the coordinator's
`GET /sd` lists every live processor's metrics target, labelled `job` and `processor`;
a Prometheus configured with only the coordinator (static) and its `/sd` scrapes the
processors, on the fixed ports of `[processor] metrics_port = { p1 = ..., p2 = ... }`,
and drops one that leaves. Every daemon exports `baton_build_info` and process metrics."""

from __future__ import annotations

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


def test_a_fixed_metrics_port_in_use_stops_the_start_naming_the_key(
        coordinated: Any, daemons: Any) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        _, path = coordinated(partitions=1, processor={"metrics_port": {"p1": port}})
        processor = daemons("p1", "processor", "-c", path, "--id", "p1")
        assert processor.wait(60) == 2
    assert f"127.0.0.1:{port} (processor.metrics_host, processor.metrics_port" in processor.log()
