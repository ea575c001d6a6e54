"""Failures end to end: real daemons report a task `failed`, the coordinator acts on it.

- a warmup whose store cannot be opened (a file sits where its directory goes): the
  handoff is cancelled, the newcomer is given another task, the scale-out completes and
  `baton status --json` names the error and the processor;
- a poison record under `on_error = "fail"`: the task is retried on each processor up
  to `max_task_attempts`, then stays failed with the error in status, while the other
  tasks keep running; the scraped `baton_tasks_failed` series fires `BatonTaskFailed`
  in `promtool test rules`;
- a processor whose process() never returns: its main loop no longer comes round, so
  it exits 3 at `loop_timeout_ms` instead of holding its tasks while its heartbeats say
  all is well, and its tasks go on elsewhere with nothing lost or duplicated.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.assignment import AssignmentConfig, ProcessorSnapshot, TaskInfo, assign
from store.paths import task_store_path
from tests.feeder import Feeder
from tests.oracle_report import oracle_check
from tests.orchestrator.test_e2e import ROOT, finish, start_two
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
ALERTS = ROOT / "metrics" / "alerts.yml"


def status_json(path: Path) -> dict[str, Any]:
    run = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", "-c", str(path),
                          "--json"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    return dict(json.loads(run.stdout))


def failures(status: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {t["name"]: t["failed"] for t in status["tasks"] if t.get("failed")}


def first_warmup(holding: dict[str, list[str]], newcomer: str, tasks: list[str],
                 max_warmups: int) -> str:
    """The task the (pure, deterministic) assignor warms up first on the newcomer."""
    procs = [ProcessorSnapshot(pid, active=frozenset(held)) for pid, held in holding.items()]
    result = assign([TaskInfo(t) for t in tasks], [*procs, ProcessorSnapshot(newcomer)],
                    AssignmentConfig(acceptable_lag=200, max_warmups=max_warmups))
    warm = {p.id: p.warmup for p in result.processors}[newcomer]
    assert warm, result
    return sorted(warm)[0]


def test_a_warmup_whose_store_cannot_open_is_replaced(job, broker) -> None:
    j = job(catch_up={"max_warmups": 1})
    j.start_coordinator()
    j.start_processor("p1", shared=True)
    j.start_processor("p2", shared=True)
    wait_for(lambda: j.balanced() and sorted(len(a) for a in j.holding().values()) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    tasks = [t["name"] for t in j.status()["tasks"]]
    broken = first_warmup(j.holding(), "p3", tasks, max_warmups=1)
    path = task_store_path(j.config.state_dir, j.config.job.name, broken, "p3")
    path.parent.mkdir(parents=True)
    path.write_text("not a store directory")      # RocksDB cannot open a store here
    feeder = Feeder(broker, j.config.job.inputs[0], keys=40, rate=300.0).start()
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    j.start_processor("p3", shared=True)
    wait_for(lambda: broken in failures(j.status()), 60, f"{broken!r} reported failed")
    failed = failures(status_json(j.path))[broken]
    assert [f["processor"] for f in failed] == ["p3"], failed
    assert str(path) in failed[0]["error"], failed
    waited = j.baton_wait()
    assert waited.returncode == 0, waited.stderr + waited.stdout
    holding = j.holding()
    assert holding["p3"] and broken not in holding["p3"], holding
    assert sorted(len(a) for a in holding.values()) == [1, 1, 2], holding
    ended = [(h["to"], h["phase"]) for h in j.status()["recent_handoffs"]
             if h["task"] == broken]
    assert ("p3", "cancelled") in ended, ended
    j.check_running()
    finish(j, feeder, broker)


def test_a_poison_task_is_retried_to_the_bound_then_stays_failed(job, broker, tmp_path: Path
                                                                 ) -> None:
    from confluent_kafka import Producer

    from tests.metrics.prometheus_harness import require_binary

    j = job(coordinator={"failure_backoff_ms": 1000, "max_task_attempts": 2})
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(len(a) for a in j.holding().values()) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    topic = j.config.job.inputs[0]
    producer = Producer(j.config.kafka_settings())
    for partition in range(4):
        producer.produce(topic, key=b"k", value=b"1", partition=partition)
    producer.produce(topic, key=b"k", value=b"poison", partition=0)  # int() raises
    for partition in range(1, 4):
        producer.produce(topic, key=b"k", value=b"2", partition=partition)
    assert producer.flush(30) == 0
    poisoned = next(t["name"] for t in j.status()["tasks"] if f"{topic}:0" in t["partitions"])

    def exhausted() -> bool:
        failed = failures(j.status()).get(poisoned, [])
        return len(failed) == 2 and all(f["exhausted"] for f in failed)

    wait_for(exhausted, 120, f"{poisoned!r} failed twice on both processors")
    status = status_json(j.path)
    failed = failures(status)[poisoned]
    assert {(f["processor"], f["attempts"]) for f in failed} == {("p1", 2), ("p2", 2)}
    assert all("poison" in f["error"] for f in failed), failed
    assert any(poisoned in e and "not retried" in e for e in status["errors"]), status["errors"]
    assert all(poisoned not in held for held in j.holding().values())
    wait_for(lambda: all(t["lag"] == 0 for t in j.status()["tasks"] if t["name"] != poisoned),
             60, "the other tasks consumed everything")
    j.check_running()
    metrics = j.metrics()
    series = [line for line in metrics.splitlines() if line.startswith("baton_tasks_failed{")]
    assert series and float(series[0].rsplit(" ", 1)[1]) == 1, series
    name, value = series[0].rsplit(" ", 1)
    labels = dict(pair.split("=", 1) for pair in name[len("baton_tasks_failed{"):-1].split(","))
    job_name = labels["job"].strip('"')
    spec = {"rule_files": [str(ALERTS)], "evaluation_interval": "1m",
            "tests": [{"name": "the scraped failed task", "interval": "1m",
                       "input_series": [{"series": name, "values": f"{float(value):g}x20"}],
                       "promql_expr_test": [{
                           "eval_time": "15m",
                           "expr": 'ALERTS{alertname="BatonTaskFailed",alertstate="firing"}',
                           "exp_samples": [{"labels": (
                               'ALERTS{alertname="BatonTaskFailed",alertstate="firing",'
                               f'job="{job_name}",severity="critical"}}'), "value": 1}]}]}]}
    rules_test = tmp_path / "failed_task_test.yml"
    rules_test.write_text(json.dumps(spec))
    run = subprocess.run([require_binary("promtool"), "test", "rules", str(rules_test)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_processor_whose_loop_hangs_exits_and_its_tasks_go_on_elsewhere(job, broker
                                                                          ) -> None:
    from confluent_kafka import Producer

    j = job(job={"class": "tests.processor.api_jobs:HangsInP1"},
            processor={"loop_timeout_ms": 3000})
    feeder = start_two(j, broker)
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    producer = Producer(j.config.kafka_settings())
    held = j.holding()["p1"][0]
    where = next(t["partitions"][0] for t in j.status()["tasks"] if t["name"] == held)
    topic, partition = where.rsplit(":", 1)
    producer.produce(topic, key=b"stuck", value=b"5", partition=int(partition))
    assert producer.flush(30) == 0
    p1 = j.processors["p1"]
    assert p1.wait(60) == 3, "the stuck processor exits 3 (its supervisor restarts it)"
    assert "main loop has not come round" in p1.log()
    assert "processor.loop_timeout_ms" in p1.log()
    # where it hung, for the operator's report: the job's process() that never returns
    assert "the main loop is stuck here" in p1.log()
    stack = p1.log().split("the main loop is stuck here")[1]
    assert "api_jobs.py" in stack and "threading.Event().wait()" in stack, stack[:3000]
    del j.processors["p1"]
    wait_for(lambda: sorted(sum(j.holding().values(), [])) == sorted(
        t["name"] for t in j.status()["tasks"]), 60, "every task held by p2")
    assert list(j.holding()) == ["p2"]
    sent = feeder.stop() + 1
    wait_for(lambda: j.all_consumed(sent), 120, f"all {sent} records consumed")
    result = oracle_check(broker, j.config)
    assert result.ok, result
    assert result.records_in == sent
    j.check_running()
