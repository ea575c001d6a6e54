"""End to end, the faults an operator meets across hosts, with real daemons on the
broker: a coordinator deposed while it lived (frozen past `takeover_ms`) still answers
`GET /sd` from the stream it follows, listing a processor registered with the new leader,
and exports none of the job's processors; a dead processor is forgotten by
`baton forget` (a live one refused) and `baton_processors{state="dead"}` returns to 0;
`coordinator.forget_dead_after_ms` forgets one on its own, and a failover keeps it
forgotten. Every metric is read from the daemons' real `/metrics`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.faults_support import FAST, leader_killed, start_standby, with_standby_url
from tests.orchestrator.test_e2e import Job
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _gauge(url: str, name: str, **labels: str) -> float:
    """One sample of a coordinator's real /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v
                                           for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"no {name}{labels} in {url}/metrics:\n{text[:2000]}")


def _sd_ids(url: str) -> list[str] | None:
    """The processors a coordinator's /sd lists (None while it answers otherwise)."""
    answer = httpx.get(f"{url}/sd", timeout=10)     # no token: as a scrape
    if answer.status_code != 200:
        return None
    return sorted(g["labels"]["processor"] for g in answer.json())


def _dead(j: Job) -> list[str]:
    return [p["id"] for p in j.status()["processors"] if not p["alive"]]


def _ids(j: Job) -> list[str]:
    return [p["id"] for p in j.status()["processors"]]


def _baton(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args, "-c", str(path)],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)


def test_a_deposed_coordinator_serves_sd_and_exports_no_processors(
        job: Callable[..., Job]) -> None:
    j = job()
    listen = with_standby_url(j)
    first, second = j.config.coordinator.urls
    j.start_coordinator()
    standby = start_standby(j, listen)
    j.start_processor("p1")
    wait_for(lambda: _sd_ids(second) == ["p1"], 30, "the standby's /sd listing p1")
    assert _gauge(second, "baton_processors", state="alive") == 0
    assert _gauge(first, "baton_processors", state="alive") == 1

    assert j.coordinator is not None
    old = j.coordinator
    os.kill(old.pid, signal.SIGSTOP)            # frozen: the standby takes over
    try:
        wait_for(lambda: "leads job" in standby.log(), 60, "the standby leading")
    finally:
        os.kill(old.pid, signal.SIGCONT)
    wait_for(lambda: "this coordinator is a standby now" in old.log(), 60,
             "the old leader stepping down")
    j.start_processor("p2")                     # registers with the new leader

    wait_for(lambda: _sd_ids(first) == ["p1", "p2"], 60,
             "the deposed coordinator's /sd listing p2, registered after the failover")
    assert _sd_ids(second) == ["p1", "p2"]
    wait_for(lambda: _gauge(second, "baton_processors", state="alive") == 2, 30,
             "the new leader counting both processors")
    assert _gauge(first, "baton_coordinator_leader") == 0
    for state in ("alive", "draining", "dead"):
        assert _gauge(first, "baton_processors", state=state) == 0, state
    assert _gauge(first, "baton_tasks_failed") == 0
    assert old.running() and standby.running()


def test_forget_removes_a_dead_processor_and_refuses_a_live_one(
        job: Callable[..., Job]) -> None:
    j = job(**FAST)
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    url = j.config.coordinator.urls[0]
    j.processors.pop("p2").kill()
    wait_for(lambda: _dead(j) == ["p2"], 60, "p2 declared dead")
    assert _gauge(url, "baton_processors", state="dead") == 1

    live = _baton(j.path, "forget", "--processor", "p1")
    assert live.returncode == 1, live
    assert "processor 'p1' is alive" in live.stderr and "baton drain" in live.stderr
    drain = _baton(j.path, "drain", "--processor", "p2")
    assert drain.returncode == 1 and "baton forget --processor p2" in drain.stderr, drain

    forgot = _baton(j.path, "forget", "--processor", "p2", "--json")
    assert forgot.returncode == 0, forgot.stderr
    result = json.loads(forgot.stdout)
    assert result["processor"] == "p2" and result["forgotten"] is True
    assert _ids(j) == ["p1"]
    assert _gauge(url, "baton_processors", state="dead") == 0
    assert _gauge(url, "baton_processors", state="alive") == 1

    again = _baton(j.path, "forget", "--processor", "p2")
    assert again.returncode == 2 and "no processor 'p2'" in again.stderr, again
    human = _baton(j.path, "forget", "--processor", "p1")
    assert human.returncode == 1    # still alive: refused, nothing changed
    assert _ids(j) == ["p1"]
    j.check_running()


def test_a_dead_processor_is_forgotten_on_its_own_and_a_failover_keeps_it_forgotten(
        job: Callable[..., Job]) -> None:
    j = job(coordinator={**FAST["coordinator"], "forget_dead_after_ms": 5000})
    listen = with_standby_url(j)
    first, second = j.config.coordinator.urls
    j.start_coordinator()
    standby = start_standby(j, listen)
    j.start_processor("p1")
    j.start_processor("p2")
    j.processors.pop("p2").kill()
    wait_for(lambda: _dead(j) == ["p2"], 60, "p2 declared dead")
    assert _gauge(first, "baton_processors", state="dead") == 1
    wait_for(lambda: _ids(j) == ["p1"], 60, "p2 forgotten on its own")
    assert _gauge(first, "baton_processors", state="dead") == 0
    assert j.coordinator is not None
    assert "forgotten after 5 s dead (coordinator.forget_dead_after_ms)" in j.coordinator.log()

    leader_killed(j, standby)
    wait_for(lambda: j.status()["coordinator"]["url"] == second, 60,
             "the standby answering as the leader")
    assert _ids(j) == ["p1"], "the new leader read p2's removal from the stream"
    wait_for(lambda: _gauge(second, "baton_processors", state="alive") == 1, 30,
             "the new leader counting p1")
    assert _gauge(second, "baton_processors", state="dead") == 0
    assert _sd_ids(second) == ["p1"]
    j.check_running()
