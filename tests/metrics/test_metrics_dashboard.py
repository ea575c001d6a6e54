"""The Grafana dashboard: importable JSON, a datasource and a `job` variable, titled
panels, and PromQL that is valid and reads only metrics Baton exports (and `up`)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from metrics_support import DASHBOARD
from promql_names import metric_names

from metrics import METRIC_NAMES

# The panels an operator needs (docs/operations.md, "Metrics"), each by a family its
# PromQL must read.
REQUIRED = {
    "baton_catchup_remaining_records", "baton_catchup_eta_seconds", "baton_task_lag_records",
    "baton_handoff_pause_seconds_bucket", "baton_handoff_phase_seconds_bucket",
    "baton_handoffs_total", "baton_processors", "baton_records_processed_total",
    "baton_transactions_total", "baton_store_bytes", "baton_job_model_generation",
    "baton_invalid_heartbeats_total", "baton_coordinator_leader", "baton_tasks_failed",
    "baton_misrouted_records_total", "baton_build_info", "process_resident_memory_bytes",
}
# What Grafana substitutes before a query reaches Prometheus.
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h", "$job": ".+"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    model: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return model


def all_panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in model["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # collapsed rows hold their panels
    return out


def exprs(model: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in all_panels(model) for t in p.get("targets", [])]


def test_dashboard_is_an_importable_model(dashboard):
    assert dashboard["title"] == "Baton"
    assert dashboard["uid"] and isinstance(dashboard["schemaVersion"], int)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    job = variables["job"]
    assert job["type"] == "query" and "baton_" in job["definition"]
    assert job["datasource"]["uid"] == "${datasource}"


def test_every_panel_has_a_title_a_unique_id_and_fits_the_grid(dashboard):
    panels = all_panels(dashboard)
    assert len(panels) >= 12
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel.get("title", "").strip(), panel
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, panel["title"]


def test_every_query_panel_uses_the_datasource_variable_and_the_job(dashboard):
    for panel in all_panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert 'job=~"$job"' in target["expr"], (panel["title"], target["expr"])


def test_queries_read_only_exported_metrics(dashboard, exposed_sample_names):
    allowed = {n for n in exposed_sample_names if _family(n) in METRIC_NAMES} | {"up"}
    # prometheus_client's process collector, on both daemons' registries
    allowed |= {n for n in exposed_sample_names if n.startswith("process_")}
    used: set[str] = set()
    for title, expr in exprs(dashboard):
        names = metric_names(expr)
        assert names, f"{title}: no metric found in {expr!r}"
        assert names <= allowed, f"{title}: {sorted(names - allowed)} not exported by Baton"
        used |= names
    assert REQUIRED <= used, f"no panel shows {sorted(REQUIRED - used)}"


def test_queries_are_valid_promql(dashboard, promtool, tmp_path: Path):
    # promtool parses every expression of a rule file: make each query a recording rule
    rules = []
    for i, (_, expr) in enumerate(exprs(dashboard)):
        for var, value in GRAFANA_VARS.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, expr
        rules.append({"record": f"baton:dashboard_query_{i}", "expr": expr})
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    check = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def test_metric_name_extraction(exposed_sample_names):
    assert metric_names(
        'histogram_quantile(0.95, sum by (le, phase) (rate(baton_handoff_phase_seconds_bucket'
        '{job=~"$job", phase!="by"}[$__rate_interval])))') == {"baton_handoff_phase_seconds_bucket"}
    assert metric_names('up == 0 and on (instance) last_over_time(baton_x[1h] offset 5m)'
                        ) == {"up", "baton_x"}
    assert metric_names('sum(rate(a_total[5m])) / ignoring(x) group_left b > 1e3') == {
        "a_total", "b"}


def _family(sample_name: str) -> str:
    """The family of a sample name (strip histogram/counter suffixes when they apply)."""
    if sample_name in METRIC_NAMES:
        return sample_name
    base = re.sub(r"_(bucket|sum|count|created)$", "", sample_name)
    if base in METRIC_NAMES:
        return base
    return base + "_total"  # a counter's _created series drops the _total


def test_panel_titles_are_unique(dashboard):
    titles = [p["title"] for p in all_panels(dashboard)]
    assert len(titles) == len(set(titles)), sorted(t for t in titles if titles.count(t) > 1)
