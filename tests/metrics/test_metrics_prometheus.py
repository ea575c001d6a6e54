"""Baton's metrics through a real Prometheus server (Debian's `prometheus` binary):
scraped from serve_metrics, queried over the HTTP API, with the alert rules loaded."""

from __future__ import annotations

import pytest
from metrics_support import ALERTS
from prometheus_client import CollectorRegistry

from metrics import CoordinatorMetrics, LagSample, ProcessorMetrics, serve_metrics

pytestmark = pytest.mark.integration

JOB = "sums"


def scalar(result: list[dict]) -> float | None:
    return float(result[0]["value"][1]) if len(result) == 1 else None


def test_a_counter_and_a_scrape_time_gauge_reach_prometheus(prometheus_factory):
    processor_registry, coordinator_registry = CollectorRegistry(), CollectorRegistry()
    processor = ProcessorMetrics(processor_registry, JOB, "p1")
    lags = [LagSample("Partition 0", "p2", "warmup", lag=3000, rate_records_per_s=100.0)]
    CoordinatorMetrics(coordinator_registry, JOB, acceptable_lag=1000,
                       lag_view=lambda: list(lags)).set_generation(5)
    processor.record_processed("Partition 0", 41)
    processor.record_processed("Partition 0")

    p_server, p_port = serve_metrics(processor_registry)
    c_server, c_port = serve_metrics(coordinator_registry)
    with p_server, c_server:
        prometheus = prometheus_factory([f"127.0.0.1:{p_port}", f"127.0.0.1:{c_port}"],
                                        job_name=JOB, rule_files=[ALERTS])

        processed = prometheus.wait_for(
            f'baton_records_processed_total{{job="{JOB}",processor="p1"}}',
            lambda r: scalar(r) == 42)
        assert processed[0]["metric"]["task"] == "Partition 0"

        processor.record_processed("Partition 0", 8)
        prometheus.wait_for('baton_records_processed_total{processor="p1"}',
                            lambda r: scalar(r) == 50)
        prometheus.wait_for(f'sum(up{{job="{JOB}"}})', lambda r: scalar(r) == 2)
        prometheus.wait_for('baton_catchup_eta_seconds{task="Partition 0",processor="p2"}',
                            lambda r: scalar(r) == 20)

        lags[0] = LagSample("Partition 0", "p2", "warmup", lag=1500, rate_records_per_s=100.0)
        prometheus.wait_for('baton_catchup_remaining_records{processor="p2"}',
                            lambda r: scalar(r) == 500)
        assert scalar(prometheus.query(f'baton_job_model_generation{{job="{JOB}"}}')) == 5

        groups = prometheus.api("rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        assert {r["name"] for r in rules} >= {"BatonCatchUpStalled", "BatonLagGrowing"}
        assert all(r["health"] in {"ok", "unknown"} for r in rules), rules
