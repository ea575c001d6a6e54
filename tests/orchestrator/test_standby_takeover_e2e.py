"""End to end: a standby takes a task over from a SIGKILLed owner, and the coordinator
hands the same task on a moment later (the scale-out it had planned goes on).

A running-sum job on 6 partitions, `catch_up.source = "changelog"`, one standby a task;
p1 and p2, then p3 (balanced), keyed traffic throughout; an owner SIGKILLed; `baton wait
--until balanced` right after. The owner killed is one whose tasks all stand by on one
survivor, with the lowest task name among both: the survivor takes them over, and the
coordinator's next move (a warmup of the busiest processor's lowest task on the third)
hands one of them on within a second. Every task must keep consuming: the oracle counts
every input's effect exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.feeder import Feeder
from tests.oracle_report import oracle_check
from tests.orchestrator.test_e2e import Job
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.smoke]

PARTITIONS = 6


@pytest.fixture
def standby_job(coordinated: Any, daemons: Any) -> Callable[..., Job]:
    def make() -> Job:
        config, path = coordinated(
            PARTITIONS, catch_up={"source": "changelog", "num_standbys": 1},
            coordinator={"processor_timeout_ms": 3000, "release_timeout_ms": 4000})
        return Job(config, path, daemons)
    return make


def _standbys(j: Job) -> dict[str, str]:
    return {t: p["id"] for p in j.status()["processors"] if p["alive"]
            for t, role in p["reported"].items() if role == "standby"}


def _victim(j: Job) -> str:
    """The owner whose loss makes a task move twice in a second (see the module doc):
    its tasks all stand by on one survivor, its lowest task is the lowest of both, and
    the third holds no standby of the survivor's tasks (else the move would pick it).
    Without one (the standbys spread otherwise), p1: the takeover alone is tested."""
    roles: dict[str, dict[str, list[str]]] = {}
    for p in j.status()["processors"]:
        if p["alive"]:
            for task, role in p["reported"].items():
                roles.setdefault(p["id"], {}).setdefault(role, []).append(task)
    standby = _standbys(j)
    for pid, held in sorted(roles.items()):
        mine = sorted(held.get("active", []))
        survivors = {standby.get(t) for t in mine}
        if len(survivors) != 1 or None in survivors:
            continue
        survivor = survivors.pop()
        third = next(p for p in roles if p not in (pid, survivor))
        theirs = roles[survivor].get("active", [])
        if mine and min(mine + theirs) in mine \
                and not set(roles[third].get("standby", [])) & set(theirs):
            return pid
    return "p1"


def test_a_task_taken_over_by_its_standby_then_handed_on_keeps_consuming(
        standby_job: Callable[..., Job], broker: Any) -> None:
    j = standby_job()
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(len(a) for a in j.holding().values()) == [3, 3],
             90, "p1 and p2 balanced with 3 tasks each")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=60, rate=300.0).start()
    wait_for(lambda: feeder.sent > 1500, 30, "some traffic")
    j.start_processor("p3")
    waited = j.baton_wait()
    assert waited.returncode == 0, waited.stderr
    wait_for(lambda: len(_standbys(j)) == PARTITIONS, 60, "a standby of every task")
    wait_for(lambda: feeder.sent > 4000, 60, "traffic with the standbys in place")
    victim = _victim(j)
    j.processors[victim].kill()
    del j.processors[victim]
    time.sleep(0.5)
    waited = j.baton_wait()
    assert waited.returncode == 0, waited.stderr
    sent = feeder.sent
    wait_for(lambda: feeder.sent > sent + 3000, 60, "traffic after the takeover")
    j.check_running()
    sent = feeder.stop()
    wait_for(lambda: j.all_consumed(sent), 120, f"all {sent} records consumed")
    result = oracle_check(broker, j.config)
    assert result.records_in == sent
    assert result.ok, result
