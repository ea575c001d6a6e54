"""`baton autoscale` on a live job: real coordinator and processors on the broker, the
local launcher starting processors as child processes, PacedSum (a running sum of a
fixed per-record cost, so one processor serves about 2,000 records/s; replicas catch up
from the changelog, at no such cost) under a keyed producer, and the running-sum oracle
over the output topic.

- a step up is followed by a scale-out and the lag recovers; a step down by drains and
  a scale-in to one processor, with no record lost or duplicated;
- the autoscaler SIGKILLed while its drain is in flight and started again: it finds the
  drain (its decision file and the status) and ends it, never draining twice;
- the processor being drained SIGKILLed mid-drain: the decision ends, the dead
  processor is forgotten, the oracle holds;
- the leading coordinator SIGKILLed right after a scale-out decision: a standby takes
  over, the autoscaler follows it and the decision ends there;
- `--dry-run --json` prints the recommendation and its inputs;
- a job of one task under more than one processor serves: with `allow_expand` the
  autoscaler expands the input, splits the task and scales out onto the child; without,
  the recommendation names the ceiling and nothing is done.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.cli.launchers import state_dir_of
from tests.daemon_support import Daemon
from tests.faults_support import leader_killed, start_standby, with_standby_url
from tests.feeder import Feeder
from tests.orchestrator.test_e2e import ROOT, Job, finish
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

# small windows and a short lag horizon, so a step shows within seconds
AUTOSCALE = {"up_window_ms": 4000, "down_window_ms": 12000, "max_lag_s": 10,
             "max_decisions_per_hour": 30, "poll_interval_ms": 500, "processor_prefix": "a"}
PACED = {"class": "processor.examples:PacedSum"}
# PacedSum's 0.5 ms a record: at most 2,000 records/s a processor, about half that on a
# loaded 2-core machine. The high rate is past one processor's most on any machine (so a
# scale-out is needed however idle the machine), and four, one task each (625 records/s),
# serve it even at half speed; three would not, since one of them holds two of the four
# tasks (1,250 records/s). One serves the low rate
HIGH_RATE, LOW_RATE = 2500.0, 60.0


@pytest.fixture
def autoscaled(job: Any) -> Iterator[Any]:
    """A job config for autoscaling; at teardown every processor the local launcher
    started (its pid files) is killed, so none outlives the test."""
    made: list[Job] = []

    def make(coordinator: dict[str, Any] | None = None, **autoscale: Any) -> Job:
        j = job(job=PACED, autoscale={**AUTOSCALE, **autoscale},
                catch_up={"source": "changelog"}, coordinator=coordinator or {})
        made.append(j)
        return j
    yield make
    for j in made:
        for pid_file in state_dir_of(j.config).glob("*.pid"):
            pid = int(pid_file.read_text().split()[0])
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def autoscaler(j: Job, *args: str) -> Daemon:
    j.restarts += 1
    return j.daemons(f"autoscale-{j.restarts}", "autoscale", "-c", j.path, "--json", *args)


def reports(daemon: Daemon) -> list[dict[str, Any]]:
    return [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]


def live(j: Job) -> list[str]:
    return sorted(p["id"] for p in j.status()["processors"]
                  if p["alive"] and not p.get("draining"))


def until(j: Job, condition: Any, timeout: float, what: str) -> None:
    """wait_for, naming the recommendation and the processors when it times out."""
    try:
        wait_for(condition, timeout, what)
    except AssertionError as exc:
        status = j.status()
        raise AssertionError(f"{exc}; recommended {status['recommended_processors']}, "
                             f"{status['autoscale']}, processors "
                             f"{[(p['id'], p['alive'], p['active']) for p in status['processors']]}"
                             ) from None


def decisions_total(j: Job, direction: str, outcome: str) -> float:
    text = j.metrics()
    found = re.search(rf'baton_autoscale_decisions_total\{{direction="{direction}",'
                      rf'job="[^"]+",outcome="{outcome}"\}} ([0-9.e+]+)', text)
    assert found, text[-2000:]
    return float(found.group(1))


def test_step_up_scales_out_and_step_down_drains_in(autoscaled, broker) -> None:
    j = autoscaled(max_processors=4)
    j.start_coordinator()
    j.start_processor("p1")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=40, rate=HIGH_RATE).start()
    scaler = autoscaler(j)
    # a step up: one processor cannot serve it all, so it scales out
    until(j, lambda: len(live(j)) >= 2, 90, "a scale-out")
    up = [r for r in reports(scaler) if r["direction"] == "up"]
    assert up[0]["outcome"] == "started" and up[0]["current"] == 1
    assert up[0]["inputs"]["capacity_per_processor"] is not None
    wait_for(lambda: j.balanced() and any(r["direction"] == "up" and r["outcome"] == "done"
                                          for r in reports(scaler)), 90, "the new ones placed")
    # ... and the lag recovers
    until(j, lambda: sum(t["lag"] or 0 for t in j.status()["tasks"]) < 2 * HIGH_RATE, 90,
             "the lag burnt")
    assert decisions_total(j, "up", "started") >= 1
    assert any(d["direction"] == "up" for d in j.status()["autoscale_decisions"])
    # a step down: 60 records/s needs one processor; the others drained in one decision
    feeder.pause()
    feeder.rate = LOW_RATE
    feeder.resume()
    # p1 is one of the processors a scale-in may drain (the least loaded go first), and
    # a drained processor stops itself: it is checked once the scale-in is over
    p1 = j.processors.pop("p1")

    def scaled_in() -> bool:
        downs = [r["outcome"] for r in reports(scaler) if r["direction"] == "down"]
        return len(live(j)) == 1 and j.balanced() and downs.count("done") == downs.count(
            "started") and not list(state_dir_of(j.config).glob("*.pid"))
    until(j, scaled_in, 180, "a scale-in to one processor, the drained ones stopped")
    downs = [r for r in reports(scaler) if r["direction"] == "down"]
    # the surplus drains in one decision on a quiet machine (the recommender's own
    # tests, tests/orchestrator/core, step the load on a fake clock); here, beside other
    # lanes, the window's peak may keep one more processor for a first decision, and a
    # second finishes the step. Either way: each decision started, then done, draining
    # what it said, down to one processor, and no scale-up after it
    started = [r for r in downs if r["outcome"] == "started"]
    assert [r["outcome"] for r in downs] == ["started", "done"] * len(started), downs
    assert all(len(r["processors"]) == r["current"] - r["target"] for r in started), downs
    assert started[-1]["target"] == 1, downs
    if "p1" in live(j):
        assert p1.running()
    else:
        assert any("p1" in r["processors"] for r in started), downs
        assert p1.wait(60) == 0, p1.log()[-3000:]
    every = reports(scaler)
    assert not [r for r in every[every.index(started[0]):] if r["direction"] == "up"]
    assert decisions_total(j, "down", "done") >= 1
    shown = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", "-c",
                            str(j.path)], capture_output=True, text=True, timeout=90, cwd=ROOT,
                           env={**os.environ, "COLUMNS": "300"})
    assert shown.returncode == 0, shown.stderr
    assert "recommended processors: 1" in shown.stdout
    assert "autoscale decisions" in shown.stdout and "drained and stopped" in shown.stdout
    assert scaler.running()
    scaler.stop()
    assert scaler.proc.returncode == 0
    finish(j, feeder, broker)


def test_autoscaler_killed_mid_drain_resumes_it(autoscaled, broker) -> None:
    # three processors and little traffic: it drains one (down to --min 2). The drain is
    # held open by freezing the two processors its tasks move to (their silence is
    # excused: processor_timeout_ms is long), and the autoscaler is killed meanwhile
    j = autoscaled(coordinator={"processor_timeout_ms": 60000}, min_processors=2)
    j.start_coordinator()
    for pid in ("p1", "p2", "p3"):
        j.start_processor(pid)
    feeder = Feeder(broker, j.config.job.inputs[0], keys=40, rate=LOW_RATE).start()
    wait_for(j.balanced, 90, "three processors balanced")
    first = autoscaler(j)
    # the decision is written and reported before the drain is asked for
    wait_for(lambda: any(r["direction"] == "down" for r in reports(first)), 90,
             "a scale-in decision", step=lambda: None)
    drained = reports(first)[0]["processors"][0]
    others = [p for p in ("p1", "p2", "p3") if p != drained]
    j.signal(others, signal.SIGSTOP)
    try:
        wait_for(lambda: drained in [p["id"] for p in j.status()["processors"]
                                     if p.get("draining")], 30, f"{drained} draining")
        first.kill()
        decision = json.loads((state_dir_of(j.config) / "decision.json").read_text())
        assert decision["processors"] == [drained] and decision["direction"] == "down"
        second = autoscaler(j)
        wait_for(lambda: "was in flight before this start" in second.log(), 60,
                 "the restarted autoscaler finding the decision")
        assert not reports(second)
    finally:
        j.signal(others, signal.SIGCONT)
    wait_for(lambda: any(r["outcome"] == "done" for r in reports(second)), 120,
             "the resumed drain's end")
    ends = [r for r in reports(second) if r["direction"] == "down"]
    # the same decision ended; no second drain started meanwhile
    assert ends[0]["outcome"] == "done" and ends[0]["processors"] == [drained], ends
    assert j.processors[drained].wait(60) == 0
    del j.processors[drained]
    assert live(j) == others
    assert not (state_dir_of(j.config) / "decision.json").exists()
    second.stop()
    finish(j, feeder, broker)


def test_processor_killed_during_a_scale_in(autoscaled, broker) -> None:
    # the processor being drained is SIGKILLed mid-drain: its tasks fail over (fenced,
    # rebuilt elsewhere), the decision ends, the dead processor is forgotten, nothing
    # is lost or duplicated, and the autoscaler keeps to its minimum
    j = autoscaled(min_processors=2)
    j.start_coordinator()
    for pid in ("p1", "p2", "p3"):
        j.start_processor(pid)
    feeder = Feeder(broker, j.config.job.inputs[0], keys=40, rate=LOW_RATE).start()
    wait_for(j.balanced, 90, "three processors balanced")
    scaler = autoscaler(j)
    wait_for(lambda: any(r["direction"] == "down" for r in reports(scaler)), 90,
             "a scale-in decision", step=lambda: None)
    drained = reports(scaler)[0]["processors"][0]
    j.processors[drained].kill()
    del j.processors[drained]
    until(j, lambda: any(r["direction"] == "down" and r["outcome"] != "started"
                         for r in reports(scaler)), 90, "the decision's end")
    until(j, lambda: j.balanced() and drained not in [p["id"] for p in
                                                      j.status()["processors"]], 90,
          "the dead processor forgotten, its tasks placed")
    assert len(live(j)) == 2
    downs = [r for r in reports(scaler) if r["direction"] == "down"]
    assert [r["outcome"] for r in downs] == ["started", "done"], downs
    scaler.stop()
    finish(j, feeder, broker)


def test_standby_coordinator_takes_over_while_it_scales_out(autoscaled, broker) -> None:
    # the leader is SIGKILLed right after a scale-out decision: the autoscaler's client
    # follows the new leader, the processors it started register there, and the
    # decision ends done, reported to the new leader
    j = autoscaled(max_processors=3)
    listen = with_standby_url(j)
    j.start_coordinator()
    standby = start_standby(j, listen)
    j.start_processor("p1")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=40, rate=HIGH_RATE).start()
    scaler = autoscaler(j)
    until(j, lambda: any(r["direction"] == "up" for r in reports(scaler)), 90,
          "a scale-out decision")
    leader_killed(j, standby)
    until(j, lambda: any(r["direction"] == "up" and r["outcome"] == "done"
                         for r in reports(scaler)), 90, "the scale-out's end")
    assert scaler.running()
    until(j, lambda: j.balanced() and len(live(j)) >= 2, 90, "the new processors placed")
    assert any(d["direction"] == "up" and d["outcome"] == "done"
               for d in j.status()["autoscale_decisions"])
    scaler.stop()
    finish(j, feeder, broker)


def test_dry_run_prints_the_recommendation_and_its_inputs(autoscaled, broker) -> None:
    j = autoscaled()
    j.start_coordinator()
    j.start_processor("p1")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=40, rate=LOW_RATE).start()
    wait_for(lambda: j.status()["recommended_processors"] is not None, 60,
             "a recommendation")
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "autoscale", "-c",
                          str(j.path), "--dry-run", "--json", "--max", "2"],
                         capture_output=True, text=True, timeout=90, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["recommended_processors"] >= 1
    assert shown["processors"] == ["p1"]
    assert shown["bounds"] == {"min": 1, "max": 2}
    assert {"reason", "capacity_per_processor", "demand", "input_rate", "lag",
            "inputs"} <= set(shown["autoscale"])
    assert shown["action"]["step"] in ("hold", "wait", "scale_out")
    # nothing was started
    assert not list(state_dir_of(j.config).glob("*.pid"))
    finish(j, feeder, broker)


def test_bounds_refused(autoscaled, broker) -> None:
    j = autoscaled()
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "autoscale", "-c",
                          str(j.path), "--min", "3", "--max", "2", "--dry-run"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    assert "--max 2 is below --min 3" in out.stderr


@pytest.mark.parametrize("allowed", [False, True], ids=["not-allowed", "allowed"])
def test_past_the_task_count_it_expands_and_splits_only_when_allowed(
        coordinated, daemons, broker, allowed: bool) -> None:
    # one input partition: one task, so one processor at most, and the high rate is past
    # what one serves. Allowed, the autoscaler doubles the input's partitions, splits the
    # task, and scales out onto the child; not allowed, it says why and holds
    # a split child replays its parent's input (the default catch-up source): a task
    # whose state is in a changelog partition does not split
    config, path = coordinated(1, job=PACED, autoscale={**AUTOSCALE, "allow_expand": allowed,
                                                        "max_processors": 2})
    j = Job(config, path, daemons)
    j.start_coordinator()
    j.start_processor("p1")
    topic = j.config.job.inputs[0]
    feeder = Feeder(broker, topic, keys=40, rate=HIGH_RATE).start()
    scaler = autoscaler(j)
    try:
        if not allowed:
            until(j, lambda: "expanding is not allowed ([autoscale] allow_expand)"
                  in str((j.status()["autoscale"] or {}).get("reason")), 90,
                  "the ceiling named in the recommendation")
            status = j.status()
            assert status["recommended_processors"] == 1
            assert status["autoscale"]["expand"] is False
            time.sleep(3.0)     # six of its polls later it has still done nothing
            assert not [r for r in reports(scaler) if r["direction"] in ("expand", "up")]
            assert [t["partitions"] for t in j.status()["tasks"]] == [[f"{topic}:0"]]
            assert live(j) == ["p1"]
        else:
            until(j, lambda: any(r["direction"] == "expand" and r["outcome"] == "started"
                                 for r in reports(scaler)), 90, "an expand decision")
            until(j, lambda: any(r["direction"] == "expand" and r["outcome"] == "done"
                                 for r in reports(scaler)), 120, "the expansion and split")
            tasks = j.status()["tasks"]
            assert len(tasks) == 2, tasks
            assert sorted(p for t in tasks for p in t["partitions"]) == \
                [f"{topic}:0", f"{topic}:1"]
            until(j, lambda: len(live(j)) == 2 and j.balanced()
                  and all(j.holding().get(p) for p in live(j)), 120,
                  "a second processor on the child task")
            up = [r for r in reports(scaler) if r["direction"] == "up"]
            assert up and up[0]["outcome"] == "started", up
            assert decisions_total(j, "expand", "done") == 1
        assert scaler.running()
        scaler.stop()
        finish(j, feeder, broker)
    finally:
        for pid_file in state_dir_of(j.config).glob("*.pid"):
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass
