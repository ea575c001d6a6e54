"""The public surface, METRIC_NAMES against what is really exposed, promtool's lint,
render(), and serve_metrics over HTTP on 127.0.0.1."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
import sys

import httpx
import prometheus_client
import pytest
from metrics_support import exposed, populate
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import metrics
from metrics import METRIC_NAMES, ProcessorMetrics, render, serve_metrics

PINNED = {  # pinned in the design: dashboards and alerts outside the project read them
    "baton_task_lag_records", "baton_catchup_remaining_records", "baton_catchup_eta_seconds",
    "baton_catchup_records_total", "baton_handoff_phase_seconds",
    "baton_handoff_pause_seconds", "baton_handoffs_total", "baton_invalid_heartbeats_total",
    "baton_processors", "baton_records_processed_total", "baton_transactions_total",
    "baton_store_bytes", "baton_job_model_generation", "baton_partition_expansions_total",
}


def test_public_surface_is_pinned():
    assert set(metrics.__all__) == {
        "CONTENT_TYPE", "COORDINATOR_METRIC_NAMES", "METRIC_NAMES", "PROCESSOR_METRIC_NAMES",
        "HANDOFF_PHASES",
        "CatchUpPath", "CatchUpSource", "CoordinatorMetrics", "HandoffOutcome", "HandoffPhase",
        "HandoffSample",
        "HandoffView", "HeartbeatOutcome", "LagSample", "LagView", "MetricsServer",
        "NullProcessorMetrics", "ProcessErrorOutcome", "ProcessorMetrics", "ProcessorState",
        "ProcessorStep", "StoreView", "TransactionOutcome", "render", "serve_metrics",
        "BUILD_METRIC_NAMES", "baton_version", "register_daemon_metrics",
        "MAX_LABEL_SETS", "JobInstrument", "JobMetricSet", "JobMetrics",
    }
    for name in metrics.__all__:
        assert hasattr(metrics, name), name


def test_metric_names_are_exactly_the_exposed_families(registry):
    populate(registry)
    families = exposed(registry)
    assert set(METRIC_NAMES) == set(families)
    assert len(METRIC_NAMES) == len(set(METRIC_NAMES))
    assert PINNED <= set(METRIC_NAMES)
    assert not [n for n in METRIC_NAMES if n.endswith("_created")]


def test_every_family_has_job_and_labels_are_bounded(registry):
    populate(registry)
    allowed = {"job", "task", "processor", "role", "phase", "outcome", "path", "source", "state",
               "topic", "le", "version", "direction"}
    for name, family in exposed(registry).items():
        assert family.documentation, f"{name} has no help text"
        for sample in family.samples:
            assert sample.labels.get("job") == "sums", sample
            assert set(sample.labels) <= allowed, f"{sample.name}: {set(sample.labels)}"


def test_exposition_passes_promtool_lint(registry, promtool):
    populate(registry)
    lint = subprocess.run([promtool, "check", "metrics"], input=render(registry),
                          capture_output=True, timeout=60)
    assert lint.returncode == 0, (lint.stdout + lint.stderr).decode()


def test_library_code_never_touches_the_global_registry(registry):
    populate(registry)
    names = {m.name for m in prometheus_client.REGISTRY.collect()}
    assert not {n for n in names if n.startswith("baton_")}


def test_render_is_the_text_format(registry):
    ProcessorMetrics(registry, "sums", "p1").record_processed("Partition 0", 4)
    text = render(registry)
    assert isinstance(text, bytes)
    samples = {s.name: s.value for f in text_string_to_metric_families(text.decode())
               for s in f.samples}
    assert samples["baton_records_processed_total"] == 4
    assert metrics.CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_serve_metrics_on_port_0_serves_the_text_format_on_loopback(registry):
    m = ProcessorMetrics(registry, "sums", "p1")
    m.record_processed("Partition 0", 42)

    server, port = serve_metrics(registry, port=0)
    with server:
        assert port > 0 and server.port == port
        assert server.url == f"http://127.0.0.1:{port}/metrics"
        reply = httpx.get(server.url, timeout=10)
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/plain")
        assert ('baton_records_processed_total{job="sums",processor="p1",'
                'task="Partition 0"} 42.0') in reply.text
        m.record_processed("Partition 0", 1)
        assert "} 43.0" in httpx.get(server.url, timeout=10).text

    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_two_servers_pick_two_free_ports():
    first, second = CollectorRegistry(), CollectorRegistry()
    ProcessorMetrics(first, "sums", "p1")
    ProcessorMetrics(second, "sums", "p2")
    (a, port_a), (b, port_b) = serve_metrics(first), serve_metrics(second)
    with a, b:
        assert port_a != port_b
        assert 'processor="p2"' in httpx.get(b.url, timeout=10).text
        assert 'processor="p2"' not in httpx.get(a.url, timeout=10).text


def test_daemon_registries_carry_build_info_and_process_metrics():
    registry = CollectorRegistry()
    metrics.register_daemon_metrics(registry, "sums")
    version = metrics.baton_version()
    assert version == importlib.metadata.version("baton")
    assert registry.get_sample_value("baton_build_info",
                                     {"job": "sums", "version": version}) == 1
    assert registry.get_sample_value("process_resident_memory_bytes") > 0
    assert registry.get_sample_value("process_open_fds") > 0
    assert registry.get_sample_value("python_info", {
        "implementation": "CPython", "major": "3", "minor": str(sys.version_info.minor),
        "patchlevel": str(sys.version_info.micro), "version": platform.python_version()}) == 1
    with pytest.raises(ValueError):   # once per registry, as every family
        metrics.register_daemon_metrics(registry, "sums")
    assert "baton_build_info" not in {m.name for m in prometheus_client.REGISTRY.collect()}
