"""Side effects after commit with real daemons (tests/processor/effect_jobs.py): every
input record's effect runs exactly once, on the processor that processed it live, across
a warmup and handoff with standbys; a processor SIGKILLed between a commit and its
effect loses that effect, and nothing runs twice."""

from __future__ import annotations

import re
import signal
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.feeder import Feeder
from tests.oracle_report import oracle_check
from tests.orchestrator.test_e2e import Job
from tests.processor.effect_jobs import BLOCK, Ledger, read_ledger
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

_CLASS = "tests.processor.effect_jobs:EffectSum"


def _inputs(broker: Any, topic: str) -> list[str]:
    """Every input record, as the job's ledgers name it."""
    return [f"{m.topic()}:{m.partition()}@{m.offset()}" for m in broker.read_all(topic)]


def _drain(j: Job, sent: int, directory: Path, lost: int = 0) -> None:
    """Let every record through and its effect run (all but `lost`), then stop the
    processors gracefully."""
    wait_for(lambda: j.all_consumed(sent), 120, f"all {sent} records consumed")
    wait_for(lambda: _done(directory) >= sent - lost, 60, "the effects of every commit")
    for pid, daemon in j.processors.items():
        if daemon.running():
            assert daemon.stop(60) == 0, f"{pid}: {daemon.log()[-3000:]}"


def test_effects_once_across_a_warmup_handoff_and_standbys(job, broker,
                                                           tmp_path: Path) -> None:
    j = job(job={"class": _CLASS, "params": {"effects_dir": str(tmp_path)}},
            catch_up={"num_standbys": 1})
    topic = j.config.job.inputs[0]
    j.start_coordinator()
    j.start_processor("p1")
    feeder = Feeder(broker, topic, keys=20, rate=400).start()
    wait_for(lambda: feeder.sent > 800, 60, "a backlog on p1 alone")
    j.start_processor("p2")         # warmups on p2, two handoffs, then a standby each way
    wait_for(lambda: j.balanced() and sorted(map(len, j.holding().values())) == [2, 2],
             120, "p1 and p2 balanced with 2 tasks each")
    moved = {p for t in j.status()["tasks"] if t["active"] == "p2" for p in t["partitions"]}
    # the standbys replay each other's tasks while traffic goes on
    wait_for(lambda: _replayed_after_handoff(tmp_path, moved), 60,
             "p1's standbys of the moved tasks to replay")
    sent = feeder.stop()
    wait_for(lambda: _done(tmp_path) >= sent, 120, f"the effects of all {sent} records")
    # the job's own metric, on p2's /metrics with its labels
    url = next(p["metrics_url"] for p in j.status()["processors"] if p["id"] == "p2")
    with urllib.request.urlopen(url, timeout=10) as reply:
        served = reply.read().decode()
    counted = [line for line in served.splitlines()
               if line.startswith("effectsum_effects_total{")
               and {f'job="{j.config.job.name}"', 'processor="p2"', 'kind="done"'}
               <= set(line.split("{")[1].split("}")[0].split(","))
               and re.search(r'task="Partition \d"', line) and float(line.split()[-1]) > 0]
    assert counted, served[-2000:]
    _drain(j, sent, tmp_path)
    result = oracle_check(broker, j.config)
    assert result.ok and result.records_in == sent, result
    p1, p2 = read_ledger(tmp_path, "p1"), read_ledger(tmp_path, "p2")
    every = _inputs(broker, topic)
    assert Counter(p1.done + p2.done) == Counter(every)          # each record's once
    for ledger in (p1, p2):
        assert set(ledger.done) <= set(ledger.live)   # only where it processed live
        assert ledger.replayed                        # its warmup and standbys replayed
    # what p2's warmups and activation replays and p1's standbys replayed (and did not
    # process live there) had no effect there
    for ledger in (p1, p2):
        assert not (set(ledger.replayed) - set(ledger.live)) & set(ledger.done)
    _replays_precede_live(p2)
    assert not p1.begun and not p2.begun


def _replayed_after_handoff(directory: Path, moved: set[str]) -> bool:
    """p1 replayed records of the moved partitions it never processed live."""
    p1 = read_ledger(directory, "p1")
    live = set(p1.live)
    return any(w.rpartition("@")[0] in moved and w not in live for w in p1.replayed)


def _replays_precede_live(ledger: Ledger) -> None:
    """On each partition it took over, the new owner's replay ends before its live
    processing begins: it replays to T1 only."""
    first_live: dict[str, int] = {}
    for where in ledger.live:
        partition, _, offset = where.rpartition("@")
        first_live.setdefault(partition, int(offset))
    for where in ledger.replayed:
        partition, _, offset = where.rpartition("@")
        if partition in first_live:
            assert int(offset) < first_live[partition], (where, first_live)


def test_an_effect_lost_to_a_sigkill_between_commit_and_effect(job, broker,
                                                               tmp_path: Path) -> None:
    j = job(job={"class": _CLASS, "params": {"effects_dir": str(tmp_path)}})
    topic = j.config.job.inputs[0]
    j.start_coordinator()
    for pid in ("p1", "p2"):
        j.start_processor(pid)
    wait_for(j.balanced, 90, "p1 and p2 balanced")
    feeder = Feeder(broker, topic, keys=20, rate=400).start()
    wait_for(lambda: feeder.sent > 400, 60, "traffic")
    before = feeder.stop()
    wait_for(lambda: _done(tmp_path) == before, 60, f"the effects of the first {before}")
    owner = next(t["active"] for t in j.status()["tasks"] if t["name"] == "Partition 0")
    survivor = "p2" if owner == "p1" else "p1"
    producer, offsets = broker.producer(), []
    producer.produce(topic, key=BLOCK, value=b"1", partition=0,
                     on_delivery=lambda err, msg: offsets.append(msg.offset()))
    assert producer.flush(30) == 0
    blocked = f"{topic}:0@{offsets[0]}"
    # the block record's transaction committed; its effect began and hangs: kill there
    wait_for(lambda: read_ledger(tmp_path, owner).begun, 60, f"{owner} to begin the effect")
    j.signal([owner], signal.SIGKILL)
    j.processors[owner].wait(30)
    wait_for(lambda: list(j.holding()) == [survivor] and len(j.holding()[survivor]) == 4
             and not j.status()["handoffs"], 120, f"{survivor} to take every task")
    feeder = Feeder(broker, topic, keys=20, rate=400).start()
    wait_for(lambda: feeder.sent > 400, 60, "traffic after the kill")
    sent = before + 1 + feeder.stop()
    _drain(j, sent, tmp_path, lost=1)
    result = oracle_check(broker, j.config)
    assert result.ok and result.records_in == sent, result   # its output committed once
    killed, kept = read_ledger(tmp_path, owner), read_ledger(tmp_path, survivor)
    assert killed.begun == [blocked] and not kept.begun
    every = Counter(_inputs(broker, topic))
    del every[blocked]
    assert Counter(killed.done + kept.done) == every    # the rest once, the blocked never
    assert blocked in kept.replayed and blocked not in kept.live   # replayed, no effect


def _done(directory: Path) -> int:
    return sum(len(read_ledger(directory, pid).done) for pid in ("p1", "p2"))
