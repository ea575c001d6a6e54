"""Crash consistency without trusting RocksDB's write-ahead log: with it off
(`[store] write_ahead_log = false`), a processor is SIGKILLed at random moments, 50 times
under traffic, and restarted each time with the same id and state directory.

Every kill loses the stores' commits since their last flush, so each restart finds its
stores behind Kafka's committed offsets, never ahead (Kafka commits first, the store
after): no task may ever fail for a store ahead of its offsets, and the running-sum
oracle over the whole output must hold.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.feeder import Feeder
from tests.orchestrator.test_e2e import Job, finish
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

KILLS = 50
SEED = 20261127
# what StoreAheadError says (processor/runtime/activation.py), in a task's failure or a log
STORE_AHEAD = "has applied offsets past the committed"


def started(j: Job) -> int:
    """How many executions of p1 have started (its log keeps every one's lines)."""
    return j.processors["p1"].log().count("processor p1 (execution")


def test_fifty_sigkills_with_the_wal_off_never_leave_a_store_ahead(
        job: Callable[..., Job], broker: Any) -> None:
    rng = random.Random(SEED)
    j = job(store={"write_ahead_log": False},
            # a restarted execution replaces the killed one at once; the failure
            # backoff only matters if a task failed
            coordinator={"failure_backoff_ms": 1000})
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(len(a) for a in j.holding().values()) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=200, rate=400.0).start()
    for kill in range(KILLS):
        if kill % 3 == 0:       # a third of the kills strike while p1 runs tasks
            wait_for(lambda: bool(j.holding().get("p1")), 60, "p1 holding tasks again")
        # a random moment: while p1 registers, catches up, activates or commits
        time.sleep(rng.uniform(0.0, 1.0))
        j.processors["p1"].kill()
        j.start_processor("p1", registered=False)
        wait_for(lambda n=kill + 2: started(j) == n, 30, "p1 started again")
        # the subject is a store ahead of its offsets; a task fenced because a stall of
        # the loaded machine's broker outlasted its transaction is re-placed, and the
        # oracle at the end says whether anything was lost or applied twice
        ahead = {t["name"]: t["failed"] for t in j.status()["tasks"]
                 if STORE_AHEAD in str(t.get("failed") or "")}
        assert not ahead, (kill, ahead)
        j.check_running()
    waited = j.baton_wait(timeout=180)
    assert waited.returncode == 0, waited.stderr
    assert not any(STORE_AHEAD in j.processors[p].log() for p in ("p1", "p2"))
    finish(j, feeder, broker)
