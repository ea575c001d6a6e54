"""Split end to end: expand 4 -> 8 partitions under traffic, `baton split`, scale out to
8 processors, one task each; the running-sum oracle over the output topic.

The feeder refreshes its metadata every 200 ms and pauses while the topic grows: a
producer that keeps writing a child partition's keys to the parent after the barrier
was recorded would break the order of those keys whatever Baton does (producers must
see the new partition count: docs/design.md, "Guarantees, and their limits"), so the
test does not let it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.feeder import Feeder
from tests.orchestrator.test_e2e import ROOT, Job, finish
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

FAST_METADATA = {"topic.metadata.refresh.interval.ms": 200}


def baton(job: Job, *args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args, "-c", str(job.path)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def expand_under_pause(job: Job, feeder: Feeder, partitions: int) -> None:
    """Grow the input while the feeder holds its records, then let it see the new count."""
    feeder.pause()
    try:
        expanded = baton(job, "expand", "--topic", job.config.job.inputs[0],
                         "--partitions", str(partitions), "--timeout", "120")
        assert expanded.returncode == 0, expanded.stderr
        time.sleep(1.0)  # > the feeder's metadata refresh interval
    finally:
        feeder.resume()


def split(job: Job, *extra: str) -> dict[str, Any]:
    done = baton(job, "split", "--json", *extra)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_split_then_scale_out_to_eight(job, broker) -> None:
    j = job(catch_up={"acceptable_lag": 100, "max_warmups": 4})
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(len(a) for a in j.holding().values()) == [2, 2],
             90, "p1 and p2 balanced")
    topic = j.config.job.inputs[0]
    feeder = Feeder(broker, topic, keys=64, rate=400.0, **FAST_METADATA).start()
    wait_for(lambda: feeder.sent > 1500, 30, "some traffic")

    assert split(j) == {"splits": [], "tasks": 4}          # nothing to split yet
    expand_under_pause(j, feeder, 8)
    wait_for(lambda: feeder.sent > 3000, 30, "traffic on 8 partitions")

    planned = split(j, "--dry-run")
    assert planned["tasks"] == 8 and len(planned["splits"]) == 4
    assert len(j.status()["tasks"]) == 4                   # a dry run records nothing
    done = split(j)
    assert done == planned
    assert {"parent": "Partition 1", "child": "Partition 5", "partitions": [f"{topic}:5"],
            "s2": [f"{topic}:1", f"{topic}:5"]} in done["splits"]
    assert [t["name"] for t in j.status()["tasks"]] == [f"Partition {i}" for i in range(8)]
    assert split(j) == {"splits": [], "tasks": 8}          # idempotent

    for n in range(3, 9):
        j.start_processor(f"p{n}")
    waited = j.baton_wait(timeout=240)
    assert waited.returncode == 0, waited.stderr
    holding = j.holding()
    assert sorted(len(tasks) for tasks in holding.values()) == [1] * 8, holding
    j.check_running()
    finish(j, feeder, broker)
