"""Shared helpers of the metrics tests: repo paths, fully populated metrics, parsed exposition.

(A module of its own rather than conftest.py: several conftest modules exist in the
tree and only the last one loaded is importable as `conftest`.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from metrics import (
    CoordinatorMetrics,
    HandoffSample,
    LagSample,
    ProcessorMetrics,
    register_daemon_metrics,
    render,
)

__all__ = ["ALERTS", "DASHBOARD", "REPO", "exposed", "populate"]

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "metrics" / "alerts.yml"
DASHBOARD = REPO / "metrics" / "dashboards" / "baton.json"


def populate(registry: CollectorRegistry) -> tuple[CoordinatorMetrics, ProcessorMetrics]:
    """Both daemons' metrics on `registry`, with one of everything recorded."""
    coordinator = CoordinatorMetrics(
        registry, "sums", acceptable_lag=100,
        lag_view=lambda: [LagSample("Partition 0", "p1", "active", 5, 900.0),
                          LagSample("Partition 0", "p2", "warmup", 1100, 50.0)],
        handoff_view=lambda: [HandoffSample("Partition 0", "catching_up", 12.0)])
    register_daemon_metrics(registry, "sums")
    coordinator.record_phase("planned", 0.5)
    coordinator.record_handoff("done", pause_seconds=0.2)
    coordinator.record_invalid_heartbeat()
    coordinator.record_expansion("events")
    coordinator.set_processors({"alive": 2})
    coordinator.set_generation(3)
    processor = ProcessorMetrics(registry, "sums", "p1",
                                 store_view=lambda: {"Partition 0": 4096})
    processor.set_memory_view(lambda: {"block_cache": 1 << 20, "memtables": 2 << 20})
    processor.record_processed("Partition 0", 10)
    processor.record_catch_up("Partition 0", "spark", 1000)
    processor.record_transaction("Partition 0", "committed")
    processor.record_handoff_step("activating", 0.1)
    processor.record_spark_session_start(3.0)
    processor.record_bulk_catch_up(40.0)
    processor.record_bulk_fallback("Partition 0")
    processor.record_input_trimmed("Partition 0")
    processor.record_heartbeat("ok")
    processor.record_process_error("Partition 0", "skip")
    processor.record_misrouted("Partition 1", "events:1", "events:5")
    processor.record_effect_error("Partition 0")
    return coordinator, processor


def exposed(registry: CollectorRegistry) -> dict[str, Any]:
    """Family name (as PromQL names it) -> the family, parsed from `render()`'s text.

    The text format writes the `_created` series of counters and histograms as gauges
    of their own; they are suffixes of those families, not families.
    """
    out: dict[str, Any] = {}
    for family in text_string_to_metric_families(render(registry).decode()):
        if family.name.endswith("_created") or not family.name.startswith("baton_"):
            continue     # process_* and python_info: prometheus_client's own collectors
        name = family.name + "_total" if family.type == "counter" else family.name
        out[name] = family
    return out
