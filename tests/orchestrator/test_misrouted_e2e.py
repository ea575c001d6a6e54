"""Expansion under live traffic from producers with stale metadata, then a split.

(a) The producer refreshes its metadata every second and keeps writing while the input
grows 4 -> 8; `[job] expansion_grace_ms` is 6 s, so every record it wrote to a parent
before it saw the new count is below the barrier. The oracle holds.
(b, c) A producer that never refreshes writes child keys to their parent partitions
long after the grace: each such record is forwarded to its child (a copy naming its
origin), nothing is lost or applied twice, before the split, after the children moved,
and after a child moved a second time.
"""

from __future__ import annotations

import itertools
import time
import urllib.request
from typing import Any

import pytest

from orchestrator.wire.barrier import FORWARDED_HEADER
from orchestrator.wire.partitioners import home_partition
from tests.feeder import Feeder
from tests.oracle_report import oracle_check
from tests.orchestrator.test_e2e import Job, finish
from tests.orchestrator.test_split_e2e import baton, split
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

GRACE = {"expansion_grace_ms": 6000}
REFRESH_1S = {"topic.metadata.refresh.interval.ms": 1000}


def barriers_reached(job: Job) -> bool:
    barriers = job.status()["barriers"]
    return bool(barriers) and all(b["settled"] and b["reached"] for b in barriers.values())


def grow(job: Job, partitions: int, *more: str) -> None:
    done = baton(job, "expand", "--topic", job.config.job.inputs[0], "--partitions",
                 str(partitions), "--timeout", "120", *more)
    assert done.returncode == 0, done.stderr


def start_two(j: Job) -> None:
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(len(a) for a in j.holding().values()) == [2, 2],
             90, "p1 and p2 balanced")


def test_split_under_traffic_with_producers_one_second_stale(job, broker) -> None:
    j = job(job=GRACE, catch_up={"acceptable_lag": 100, "max_warmups": 4})
    start_two(j)
    feeder = Feeder(broker, j.config.job.inputs[0], keys=400, rate=400.0,
                    **REFRESH_1S).start()
    wait_for(lambda: feeder.sent > 1500, 30, "some traffic")
    grow(j, 8, "--no-wait")                     # the feeder keeps writing throughout
    unsettled = j.status()["barriers"]
    assert len(unsettled) == 4 and not any(b["settled"] for b in unsettled.values())
    time.sleep(3.0)                             # the split comes inside the grace
    assert len(split(j)["splits"]) == 4
    for n in range(3, 9):
        j.start_processor(f"p{n}")
    waited = j.baton_wait(timeout=240)
    assert waited.returncode == 0, waited.stderr
    assert barriers_reached(j)
    assert sorted(len(a) for a in j.holding().values()) == [1] * 8
    finish(j, feeder, broker)


def stale_writes(broker: Any, topic: str, count: int, rounds: int,
                 keys: list[bytes]) -> int:
    """Write child keys straight to their parent partitions, as a producer that never
    refreshed its metadata would; returns how many."""
    producer = broker.producer(**{"enable.idempotence": True})
    sent = 0
    for _, key in zip(range(rounds), itertools.cycle(keys), strict=False):
        parent = home_partition("consistent_random", key, count) % (count // 2)
        producer.produce(topic, key=key, value=b"5", partition=parent)
        sent += 1
    assert producer.flush(30) == 0
    return sent


def forwarded_copies(broker: Any, topic: str) -> int:
    return sum(1 for m in broker.read_all(topic)
               if any(name == FORWARDED_HEADER for name, _ in (m.headers() or ())))


def misrouted_counted(job: Job) -> float:
    total = 0.0
    for p in job.status()["processors"]:
        if not p["alive"] or not p.get("metrics_url"):
            continue
        with urllib.request.urlopen(p["metrics_url"], timeout=10) as reply:
            for line in reply.read().decode().splitlines():
                if line.startswith("baton_misrouted_records_total{"):
                    total += float(line.rsplit(" ", 1)[1])
    return total


def test_records_written_to_a_parent_past_the_grace_are_forwarded(job, broker) -> None:
    j = job(job={"expansion_grace_ms": 1000},
            catch_up={"acceptable_lag": 100, "max_warmups": 4})
    start_two(j)
    topic = j.config.job.inputs[0]
    feeder = Feeder(broker, topic, keys=64, rate=300.0, **REFRESH_1S).start()
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    grow(j, 8)
    wait_for(lambda: barriers_reached(j), 60, "every barrier settled and reached")
    # the feeder's own keys: the stale writes land in running sums the oracle checks
    children = [k for k in feeder.keys if home_partition("consistent_random", k, 8) >= 4]
    stale = stale_writes(broker, topic, 8, 200, children)           # (b) still embedded
    assert len(split(j)["splits"]) == 4
    for n in range(3, 7):
        j.start_processor(f"p{n}")
    waited = j.baton_wait(timeout=240)
    assert waited.returncode == 0, waited.stderr
    stale += stale_writes(broker, topic, 8, 200, children)          # children live
    # (c) a child moved a second time after it went live
    child = next(p for p, tasks in j.holding().items() if "Partition 5" in tasks)
    j.start_processor("p7")
    drained = baton(j, "drain", "--processor", child, "--wait")
    assert drained.returncode == 0, drained.stderr
    assert "Partition 5" not in j.holding().get(child, [])
    stale += stale_writes(broker, topic, 8, 200, children)
    waited = j.baton_wait(timeout=240)
    assert waited.returncode == 0, waited.stderr
    wait_for(lambda: forwarded_copies(broker, topic) >= stale, 60, "every stale write forwarded")
    assert forwarded_copies(broker, topic) == stale
    assert misrouted_counted(j) > 0
    sent = feeder.stop() + stale
    wait_for(lambda: j.all_consumed(sent), 120, f"all {sent} records consumed")
    result = oracle_check(broker, j.config)
    assert result.ok, result
    assert result.records_in == sent
