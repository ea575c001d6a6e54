"""Entries that expire and prefix scans end to end, with real daemons: RecentSum
(tests/processor/state_jobs.py: per key, a scan of its values of the last second of
stream time, and a total that lapses after 0.7 s without a record) under a live keyed
producer that pauses now and then (so totals lapse), its output checked key by key
against the job's rules computed from the input topic alone:

- scale out 2 -> 3 (catch_up.source = "input"): warmups replay the input through
  process(), expiring and scanning as the owners did, then the handoffs;
- catch_up.source = "changelog" with a standby, the owner SIGKILLed: the standby's
  state, applied from the changelog (expiry deletes included), takes over; keys last
  seen two hours of stream time ago are swept (their tombstones in the changelog);
- expand 4 -> 8, split, scale out 2 -> 4: the split children rebuild their keys'
  entries from the parent partition through a key filter.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

from orchestrator.wire.barrier import input_records
from orchestrator.wire.changelog import changelog_topic
from tests.feeder import Feeder
from tests.orchestrator.test_e2e import Job
from tests.orchestrator.test_split_e2e import FAST_METADATA, expand_under_pause, split
from tests.processor.state_jobs import describe, expected_outputs, wrong_keys
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

_JOB = {"class": "tests.processor.state_jobs:RecentSum"}


def _gap(feeder: Feeder) -> None:
    """Hold the producer longer than the totals' gap (every key's total lapses)."""
    feeder.pause()
    time.sleep(1.0)
    feeder.resume()


def _finish(j: Job, feeder: Feeder, broker: Any, extra: int = 0) -> None:
    """Stop the producer, let every record through, and compare each key's outputs with
    RecentSum's rules over the input topic (`extra`: records sent besides the feeder's)."""
    sent = feeder.stop() + extra
    wait_for(lambda: j.all_consumed(sent), 120, f"all {sent} records consumed")
    j.check_running()
    inputs = describe(m for topic in j.config.job.inputs
                      for m in input_records(broker.read_all(topic)))
    assert len(inputs) == sent
    expected = expected_outputs(inputs)
    outputs = [(m.key(), m.value()) for m in broker.read_all(j.config.job.output)]
    assert len(outputs) == sent
    assert wrong_keys(expected, outputs) == []
    # the rules were exercised: windows of several values, entries that expired, and
    # totals that lapsed (a total equal to its record's value past the key's first)
    values: dict[bytes, list[int]] = defaultdict(list)
    for key, raw, _, _ in inputs:
        values[key].append(int(raw))
    counts = [int(out.split(":")[0]) for outs in expected.values() for out in outs]
    assert max(counts) > 2 and max(counts) < max(map(len, values.values()))
    assert any(i and int(out.split(":")[2]) == values[key][i]
               for key, outs in expected.items() for i, out in enumerate(outs))


def test_ttl_and_scans_through_a_scale_out(job, broker) -> None:
    j = job(job=_JOB)
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(map(len, j.holding().values())) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=[b"k1", b"k10", b"k2", b"k11",
                                                          *(b"u%d" % i for i in range(20))],
                    rate=300.0).start()
    wait_for(lambda: feeder.sent > 1500, 30, "some traffic")
    _gap(feeder)
    j.start_processor("p3")
    waited = j.baton_wait()
    assert waited.returncode == 0, waited.stderr
    assert sorted(map(len, j.holding().values())) == [1, 1, 2]
    sent = feeder.sent
    wait_for(lambda: feeder.sent > sent + 600, 30, "traffic after the handoffs")
    _finish(j, feeder, broker)


def test_ttl_and_scans_from_the_changelog_after_a_sigkill(job, broker) -> None:
    j = job(job=_JOB, catch_up={"source": "changelog", "num_standbys": 1},
            coordinator={"processor_timeout_ms": 3000, "release_timeout_ms": 4000})
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(map(len, j.holding().values())) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    old = [b"old%d" % i for i in range(8)]          # one record each, two hours ago
    producer = broker.producer()
    stamp = int(time.time() * 1000) - 2 * 3_600_000
    for i, key in enumerate(old):
        producer.produce(j.config.job.inputs[0], key=key, value=b"1", timestamp=stamp + i)
    assert producer.flush(30) == 0
    feeder = Feeder(broker, j.config.job.inputs[0], keys=24, rate=300.0).start()
    wait_for(lambda: feeder.sent > 1500, 30, "some traffic")
    _gap(feeder)
    wait_for(lambda: feeder.sent > 2500, 30, "traffic after the gap")
    j.processors["p1"].kill()
    del j.processors["p1"]
    wait_for(lambda: list(j.holding()) == ["p2"] and len(j.holding()["p2"]) == 4, 60,
             "p2 to take p1's tasks from its standbys")
    sent = feeder.sent
    wait_for(lambda: feeder.sent > sent + 600, 30, "traffic after the kill")
    _finish(j, feeder, broker, extra=len(old))
    # their totals were never read again: only the sweep deleted them
    swept = {m.key() for m in broker.read_all(changelog_topic(j.config.job.name))
             if m.value() is None}
    assert {b"\x01" + key for key in old} <= swept


def test_ttl_and_scans_through_a_split(job, broker) -> None:
    j = job(job=_JOB, catch_up={"acceptable_lag": 100, "max_warmups": 4})
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(map(len, j.holding().values())) == [2, 2],
             90, "p1 and p2 balanced")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=32, rate=300.0,
                    **FAST_METADATA).start()
    wait_for(lambda: feeder.sent > 1500, 30, "some traffic")
    expand_under_pause(j, feeder, 8)
    wait_for(lambda: feeder.sent > 2500, 30, "traffic on 8 partitions")
    assert len(split(j)["splits"]) == 4
    j.start_processor("p3")
    j.start_processor("p4")
    waited = j.baton_wait(timeout=240)
    assert waited.returncode == 0, waited.stderr
    assert sorted(map(len, j.holding().values())) == [2, 2, 2, 2]
    _gap(feeder)
    sent = feeder.sent
    wait_for(lambda: feeder.sent > sent + 600, 30, "traffic after the split")
    _finish(j, feeder, broker)
