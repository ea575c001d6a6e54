"""The Prometheus alert rules: promtool accepts them, they read only exported metrics,
they tell the operator what to check, and they fire (and stay quiet) when they should,
checked with `promtool test rules` on synthetic series."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from metrics_support import ALERTS
from promql_names import metric_names

from metrics import METRIC_NAMES

ALERT_NAMES = {
    "BatonCatchUpStalled", "BatonHandoffStuck", "BatonHandoffNotStarting",
    "BatonInvalidHeartbeats", "BatonProcessorDead", "BatonCoordinatorDown",
    "BatonProcessorTargetDown", "BatonLagGrowing", "BatonTaskFailed",
    "BatonMisroutedRecords", "BatonInputTrimmed", "BatonTaskStalled",
    "BatonBelowRecommendation",
}


RECORDED = {"baton:coordinator_target", "baton:processor_target"}
RUNBOOK = ALERTS.parents[1] / "docs" / "runbook.md"


def _all_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    """The alerting rules (the recording rules behind them are checked with them)."""
    return [rule for rule in _all_rules() if "alert" in rule]


def test_recording_rules_are_the_target_memories() -> None:
    assert {r["record"] for r in _all_rules() if "record" in r} == RECORDED


def test_every_alert_links_its_own_runbook_section(rules) -> None:
    text = RUNBOOK.read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", line[3:].strip().lower()).replace(" ", "-")
               for line in text.splitlines() if line.startswith("## ")}
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/runbook.md#{rule['alert'].lower()}", rule["alert"]
        assert url.split("#")[1] in anchors, f"no section ## {rule['alert']} in {RUNBOOK}"
    sections = [line[3:].strip() for line in text.splitlines() if line.startswith("## Baton")]
    assert sorted(sections) == sorted(ALERT_NAMES)


def test_no_alert_forgets_a_target_after_a_window(rules) -> None:
    """A target-down alert joined with the target's own past samples in a range window
    resolves itself once the window has passed while the target is still down."""
    for rule in rules:
        if "up == 0" in rule["expr"]:
            assert "last_over_time" not in rule["expr"], rule["alert"]


def test_promtool_check_rules_passes(promtool):
    check = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(ALERT_NAMES) + len(RECORDED)} rules found" in check.stdout


def test_rules_are_the_expected_alerts_with_operator_annotations(rules):
    assert {r["alert"] for r in rules} == ALERT_NAMES
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        summary, description = rule["annotations"]["summary"], rule["annotations"]["description"]
        assert summary.strip() and len(description) > 150, rule["alert"]
        # every alert tells the operator where to look
        assert re.search(r"[Cc]heck|find", description), rule["alert"]


def test_rules_read_only_exported_metrics(rules, exposed_sample_names):
    allowed = set(exposed_sample_names) | set(METRIC_NAMES) | {"up"} | RECORDED
    for rule in rules:
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= allowed, f"{rule['alert']}: {sorted(names - allowed)}"
        assert any(n.startswith(("baton_", "baton:")) for n in names), rule["alert"]


J = 'job="sums"'
WARMUP = f'{J},task="Partition 0",processor="p3"'
TARGET = 'instance="127.0.0.1:8700"'
PROC_TARGET = 'instance="127.0.0.1:40001"'


def firing(alert: str, eval_time: str, *labels: dict[str, str]) -> dict[str, Any]:
    """An expectation: at `eval_time`, exactly these instances of `alert` are firing."""
    return {"eval_time": eval_time,
            "expr": f'ALERTS{{alertname="{alert}",alertstate="firing"}}',
            "exp_samples": [{"labels": _series("ALERTS", {
                "alertname": alert, "alertstate": "firing", **lab}), "value": 1}
                for lab in labels]}


def _series(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


CASES: dict[str, dict[str, Any]] = {
    "catch-up stalled fires on a flat backlog, not on a shrinking or empty one": {
        "input_series": [
            {"series": f"baton_catchup_remaining_records{{{WARMUP}}}", "values": "5000x40"},
            {"series": f'baton_catchup_remaining_records{{{J},task="Partition 1",processor="p3"}}',
             "values": "50000-1000x40"},
            {"series": f'baton_catchup_remaining_records{{{J},task="Partition 2",processor="p3"}}',
             "values": "0x40"},
        ],
        "promql_expr_test": [
            firing("BatonCatchUpStalled", "5m"),
            firing("BatonCatchUpStalled", "30m", {"job": "sums", "task": "Partition 0",
                                                  "processor": "p3", "severity": "warning"}),
        ],
    },
    "a handoff stuck releasing fires; a long catching_up does not": {
        "input_series": [
            {"series": f'baton_handoff_phase_age_seconds{{{J},phase="releasing"}}',
             "values": "0+60x20"},
            {"series": f'baton_handoff_phase_age_seconds{{{J},phase="catching_up"}}',
             "values": "0+60x20"},
        ],
        "promql_expr_test": [
            firing("BatonHandoffStuck", "4m"),
            firing("BatonHandoffStuck", "10m", {"job": "sums", "phase": "releasing",
                                                "severity": "critical"}),
        ],
    },
    "planned handoffs with no warmup running fire; with a warmup running they wait": {
        "input_series": [
            {"series": f'baton_handoff_phase_age_seconds{{{J},phase="planned"}}',
             "values": "0+60x60"},
            {"series": f'baton_handoffs_in_flight{{{J},phase="catching_up"}}', "values": "0x60"},
            {"series": 'baton_handoff_phase_age_seconds{job="busy",phase="planned"}',
             "values": "0+60x60"},
            {"series": 'baton_handoffs_in_flight{job="busy",phase="catching_up"}',
             "values": "2x60"},
        ],
        "promql_expr_test": [
            firing("BatonHandoffNotStarting", "30m"),
            firing("BatonHandoffNotStarting", "45m", {"job": "sums", "severity": "warning"}),
        ],
    },
    "a zombie heartbeating every second fires; one stale execution exiting does not": {
        "input_series": [
            {"series": f"baton_invalid_heartbeats_total{{{J}}}", "values": "0+60x20"},
            {"series": 'baton_invalid_heartbeats_total{job="calm"}', "values": "0 1x20"},
        ],
        "promql_expr_test": [
            firing("BatonInvalidHeartbeats", "3m"),
            firing("BatonInvalidHeartbeats", "15m", {"job": "sums", "severity": "warning"}),
        ],
    },
    "a dead processor fires": {
        "input_series": [
            {"series": f'baton_processors{{{J},state="dead"}}', "values": "0 0 1x10"},
            {"series": f'baton_processors{{{J},state="alive"}}', "values": "3 3 2x10"},
        ],
        "promql_expr_test": [
            firing("BatonProcessorDead", "2m"),
            firing("BatonProcessorDead", "5m", {"job": "sums", "severity": "warning"}),
        ],
    },
    "a job below its recommendation for 15 minutes fires; a standby's 0 does not count": {
        "input_series": [
            {"series": f'baton_recommended_processors{{{J},instance="a:8700"}}',
             "values": "2 4x30"},
            {"series": f'baton_recommended_processors{{{J},instance="b:8700"}}',
             "values": "0x31"},
            {"series": f'baton_processors{{{J},instance="a:8700",state="alive"}}',
             "values": "2x31"},
            {"series": f'baton_processors{{{J},instance="b:8700",state="alive"}}',
             "values": "0x31"},
        ],
        "promql_expr_test": [
            firing("BatonBelowRecommendation", "10m"),
            firing("BatonBelowRecommendation", "20m", {"job": "sums", "severity": "warning"}),
        ],
    },
    "a job at its recommendation never fires": {
        "input_series": [
            {"series": f'baton_recommended_processors{{{J}}}', "values": "3x31"},
            {"series": f'baton_processors{{{J},state="alive"}}', "values": "3x31"},
        ],
        "promql_expr_test": [firing("BatonBelowRecommendation", "25m")],
    },
    "a down coordinator or processor target fires; a down non-Baton target does not": {
        "input_series": [
            {"series": f'up{{job="sums",{TARGET}}}', "values": "1 1 1 0x10"},
            {"series": f'baton_coordinator_leader{{{J},{TARGET}}}', "values": "1 1 1 _x10"},
            {"series": f'up{{job="sums",{PROC_TARGET}}}', "values": "1 1 0x10"},
            {"series": f'baton_heartbeats_total{{{J},{PROC_TARGET},processor="p1",outcome="ok"}}',
             "values": "1 2 _x10"},
            {"series": 'up{job="node",instance="10.0.0.1:9100"}', "values": "0x12"},
        ],
        "promql_expr_test": [
            firing("BatonCoordinatorDown", "3m"),
            firing("BatonCoordinatorDown", "8m", {"job": "sums", "instance": "127.0.0.1:8700",
                                                  "severity": "critical"}),
            firing("BatonProcessorTargetDown", "8m", {
                "job": "sums", "instance": "127.0.0.1:40001", "severity": "warning"}),
        ],
    },
    "a coordinator down for three hours fires all along, and stops when it is back": {
        "input_series": [
            {"series": f'up{{job="sums",{TARGET}}}', "values": "1x10 0x180 1x20"},
            {"series": f'baton_coordinator_leader{{{J},{TARGET}}}',
             "values": "1x10 _x180 1x20"},
            {"series": f'up{{job="sums",{PROC_TARGET}}}', "values": "1x10 0x150 1x50"},
            {"series": f'baton_heartbeats_total{{{J},{PROC_TARGET},processor="p1",outcome="ok"}}',
             "values": "0+60x10 _x150 600+60x50"},
        ],
        "promql_expr_test": [
            firing("BatonCoordinatorDown", "5m"),
            *[firing("BatonCoordinatorDown", at, {"job": "sums", "instance": "127.0.0.1:8700",
                                                  "severity": "critical"})
              for at in ("15m", "70m", "150m", "185m")],
            firing("BatonProcessorTargetDown", "140m", {
                "job": "sums", "instance": "127.0.0.1:40001", "severity": "warning"}),
            firing("BatonCoordinatorDown", "200m"),
        ],
    },
    "processors reaching no coordinator fire, as long as no heartbeat succeeds": {
        "input_series": [
            {"series": f'baton_heartbeats_total{{{J},processor="p1",outcome="ok"}}',
             "values": "0+60x5 300x100"},
            {"series": f'baton_heartbeats_total{{{J},processor="p1",outcome="unreachable"}}',
             "values": "0x5 0+60x100"},
            {"series": 'baton_heartbeats_total{job="flaky",processor="p1",outcome="ok"}',
             "values": "0+60x105"},
            {"series": 'baton_heartbeats_total{job="flaky",processor="p1",outcome="unreachable"}',
             "values": "0+1x105"},
        ],
        "promql_expr_test": [
            firing("BatonCoordinatorDown", "4m"),
            firing("BatonCoordinatorDown", "90m", {"job": "sums", "severity": "critical"}),
        ],
    },
    "lag growing above acceptable_lag fires; flat or small lag does not": {
        "input_series": [
            {"series": f"baton_catchup_acceptable_lag_records{{{J}}}", "values": "1000x60"},
            {"series": f'baton_task_lag_records{{{J},task="Partition 0",processor="p1",'
                       'role="active"}', "values": "0+100x60"},
            {"series": f'baton_task_lag_records{{{J},task="Partition 1",processor="p2",'
                       'role="standby"}', "values": "5000x60"},
            {"series": f'baton_task_lag_records{{{J},task="Partition 2",processor="p2",'
                       'role="standby"}', "values": "0+10x60"},
        ],
        "promql_expr_test": [
            firing("BatonLagGrowing", "20m"),
            firing("BatonLagGrowing", "40m", {"job": "sums", "task": "Partition 0",
                                              "processor": "p1", "role": "active",
                                              "severity": "warning"}),
        ],
    },
    "misrouted records fire at once and resolve 15 minutes after the last one": {
        "input_series": [
            {"series": f'baton_misrouted_records_total{{{J},task="Partition 1",processor="p1"}}',
             "values": "0 0 3 5 5x30"},
            {"series": f'baton_misrouted_records_total{{{J},task="Partition 2",processor="p1"}}',
             "values": "0x35"},
        ],
        "promql_expr_test": [
            firing("BatonMisroutedRecords", "1m"),
            firing("BatonMisroutedRecords", "4m", {"job": "sums", "task": "Partition 1",
                                                   "severity": "warning"}),
            firing("BatonMisroutedRecords", "25m"),
        ],
    },
    "a replay refused for trimmed input fires at once, until the processor restarts": {
        "input_series": [
            {"series": f'baton_catchup_gap_errors_total{{{J},task="Partition 1",processor="p2"}}',
             "values": "_ _ 1x10 _x10"},
            {"series": f'baton_catchup_records_total{{{J},task="Partition 2",processor="p2",'
                       'path="consumer",source="input"}', "values": "0+100x20"},
        ],
        "promql_expr_test": [
            firing("BatonInputTrimmed", "1m"),
            firing("BatonInputTrimmed", "2m", {"job": "sums", "task": "Partition 1",
                                               "processor": "p2", "severity": "critical"}),
            firing("BatonInputTrimmed", "20m"),
        ],
    },
    "a stalled read fires at once and resolves 15 minutes after the last one": {
        "input_series": [
            {"series": f'baton_task_stalls_total{{{J},task="Partition 1",processor="p3",'
                       'role="active"}', "values": "_ 0 0 1 1x30"},
            {"series": f'baton_task_stalls_total{{{J},task="Partition 2",processor="p3",'
                       'role="standby"}', "values": "0x35"},
        ],
        "promql_expr_test": [
            firing("BatonTaskStalled", "2m"),
            firing("BatonTaskStalled", "4m", {"job": "sums", "task": "Partition 1",
                                              "processor": "p3", "role": "active",
                                              "severity": "warning"}),
            firing("BatonTaskStalled", "25m"),
        ],
    },
    "a task failed for 10 minutes fires; one retried within minutes does not": {
        "input_series": [
            {"series": f"baton_tasks_failed{{{J}}}", "values": "0 1x20"},
            {"series": 'baton_tasks_failed{job="retried"}', "values": "0 1 1 1 0x20"},
        ],
        "promql_expr_test": [
            firing("BatonTaskFailed", "5m"),
            firing("BatonTaskFailed", "15m", {"job": "sums", "severity": "critical"}),
        ],
    },
}


@pytest.mark.parametrize("case", list(CASES))
def test_alert_fires_when_it_should(case, promtool, tmp_path: Path):
    spec = {"rule_files": [str(ALERTS)], "evaluation_interval": "1m",
            "tests": [{"name": case, "interval": "1m", **CASES[case]}]}
    path = tmp_path / "alerts_test.yml"
    path.write_text(json.dumps(spec, indent=2))  # JSON is YAML
    run = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_alert_has_a_promtool_case_that_sees_it_fire() -> None:
    fired = {sample["labels"].split('alertname="')[1].split('"')[0]
             for case in CASES.values() for test in case["promql_expr_test"]
             for sample in test["exp_samples"]}
    assert fired == ALERT_NAMES
