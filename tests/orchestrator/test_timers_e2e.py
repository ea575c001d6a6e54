"""Timers end to end, with real daemons under a live keyed producer that pauses now and
then (so every key's run closes on the records that follow):

- stream-time timers (Gaps, tests/processor/timer_jobs.py) through a scale-out 2 -> 3
  and an owner SIGKILLed, then through expand 4 -> 8, split and scale-out: each key's
  output, checked against the job's rules computed from the input topic alone, shows
  every timer fired exactly once, where the rules say, on whichever owner held it;
- wall-clock timers (catch_up.source = "changelog", a standby) through an owner
  SIGKILLed: every record's reminder is output exactly once.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from orchestrator.wire.barrier import Marker, decode_marker, input_records
from orchestrator.wire.partitioners import home_partition
from tests.feeder import Feeder
from tests.orchestrator.test_e2e import Job as E2EJob
from tests.orchestrator.test_split_e2e import FAST_METADATA, expand_under_pause, split
from tests.processor.state_jobs import wrong_keys
from tests.processor.timer_jobs import GapsModel
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

GAP_MS = 300
_GAPS = {"class": "tests.processor.timer_jobs:Gaps", "params": {"gap_ms": GAP_MS}}


def _pause(feeder: Feeder) -> None:
    """Hold the producer longer than the gap: every key's run closes on the next record
    of its partition."""
    feeder.pause()
    time.sleep(0.8)
    feeder.resume()


def _expected(j: E2EJob, broker: Any) -> tuple[dict[bytes, list[str]], int]:
    """Gaps' outputs per key from the input topic (each partition in offset order, a
    parent's barrier marker moving its child keys' timers), and the records counted."""
    name = j.config.job.name
    raw = broker.read_all(j.config.job.inputs[0])
    kept = {(m.partition(), m.offset()) for m in input_records(raw)}
    model = GapsModel(GAP_MS)
    records, marked, later = 0, set(), []
    for m in raw:
        marker = decode_marker(name, m.headers(), m.value()) if m.key() is None else False
        if isinstance(marker, Marker) and m.partition() not in marked:
            marked.add(m.partition())
            children = {int(c.rpartition(":")[2]) for c in marker.children}
            later.extend(children)
            model.rehome(m.partition(), children, lambda key, n=marker.count: home_partition(
                j.config.job.partitioner, key, n))
        if (m.partition(), m.offset()) not in kept:
            continue            # a marker, or a record forwarded to the child it belongs to
        records += 1
        if m.partition() not in later:
            model.record(m.partition(), m.key(), m.timestamp()[1])
    # a child partition is read once its parent passed the marker: its clock starts there
    for m in raw:
        if m.partition() in later and (m.partition(), m.offset()) in kept:
            model.record(m.partition(), m.key(), m.timestamp()[1])
    return dict(model.outputs), records


def _finish(j: E2EJob, feeder: Feeder, broker: Any) -> None:
    sent = feeder.stop()
    wait_for(lambda: j.all_consumed(sent), 120, f"all {sent} records consumed")
    j.check_running()
    expected, records = _expected(j, broker)
    assert records == sent
    outputs = [(m.key(), m.value()) for m in broker.read_all(j.config.job.output)]
    assert wrong_keys(expected, outputs) == []
    closed = sum(out.startswith("closed") for outs in expected.values() for out in outs)
    assert closed >= 3 * len(expected)          # every key's run closed several times
    assert len(outputs) == sent + closed


def test_stream_time_timers_through_a_scale_out_and_a_sigkill(job, broker) -> None:
    j = job(job=_GAPS, coordinator={"processor_timeout_ms": 3000})
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(map(len, j.holding().values())) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=24, rate=300.0).start()
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    _pause(feeder)
    wait_for(lambda: feeder.sent > 1500, 30, "traffic after the pause")
    feeder.pause()                      # every run's timer pending through the handoffs
    j.start_processor("p3")
    waited = j.baton_wait()
    assert waited.returncode == 0, waited.stderr
    assert sorted(map(len, j.holding().values())) == [1, 1, 2]
    time.sleep(0.5)
    feeder.resume()                     # the new owners fire them
    wait_for(lambda: feeder.sent > 2500, 30, "traffic after the handoffs")
    _pause(feeder)
    wait_for(lambda: feeder.sent > 3000, 30, "traffic after another pause")
    j.processors["p1"].kill()
    del j.processors["p1"]
    wait_for(lambda: sorted(j.holding()) == ["p2", "p3"]
             and sum(map(len, j.holding().values())) == 4, 90,
             "p2 and p3 to take p1's tasks")
    _pause(feeder)
    sent = feeder.sent
    wait_for(lambda: feeder.sent > sent + 600, 30, "traffic after the kill")
    _finish(j, feeder, broker)


def test_stream_time_timers_through_a_split(job, broker) -> None:
    j = job(job=_GAPS, catch_up={"acceptable_lag": 100, "max_warmups": 4})
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(map(len, j.holding().values())) == [2, 2],
             90, "p1 and p2 balanced")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=32, rate=300.0,
                    **FAST_METADATA).start()
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    _pause(feeder)
    wait_for(lambda: feeder.sent > 1500, 30, "traffic after the pause")
    expand_under_pause(j, feeder, 8)    # the keys' runs pending over the barrier
    wait_for(lambda: feeder.sent > 2500, 30, "traffic on 8 partitions")
    assert len(split(j)["splits"]) == 4
    j.start_processor("p3")
    j.start_processor("p4")
    waited = j.baton_wait(timeout=240)
    assert waited.returncode == 0, waited.stderr
    assert sorted(map(len, j.holding().values())) == [2, 2, 2, 2]
    _pause(feeder)
    sent = feeder.sent
    wait_for(lambda: feeder.sent > sent + 600, 30, "traffic after the split")
    _finish(j, feeder, broker)


def test_wall_clock_timers_fire_once_through_a_sigkill(job, broker) -> None:
    j = job(job={"class": "tests.processor.timer_jobs:Remind"},
            catch_up={"source": "changelog", "num_standbys": 1},
            coordinator={"processor_timeout_ms": 3000, "release_timeout_ms": 4000})
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(map(len, j.holding().values())) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=24, rate=300.0).start()
    wait_for(lambda: feeder.sent > 1500, 30, "some traffic")
    j.processors["p1"].kill()           # reminders due and not yet fired among its tasks
    del j.processors["p1"]
    wait_for(lambda: list(j.holding()) == ["p2"] and len(j.holding()["p2"]) == 4, 60,
             "p2 to take p1's tasks from its standbys")
    sent = feeder.sent
    wait_for(lambda: feeder.sent > sent + 600, 30, "traffic after the kill")
    sent = feeder.stop()
    wait_for(lambda: j.all_consumed(sent), 120, f"all {sent} records consumed")
    inputs = {f"{m.partition()}:{m.offset()}" for m in
              input_records(broker.read_all(j.config.job.inputs[0]))}
    assert len(inputs) == sent

    def reminders() -> Counter[str]:
        values = (m.value().decode() for m in broker.read_all(j.config.job.output))
        return Counter(v.removeprefix("reminder:") for v in values
                       if v.startswith("reminder:"))

    wait_for(lambda: set(reminders()) >= inputs, 30, "every reminder")
    time.sleep(1.0)                     # none comes twice, even late
    counted = reminders()
    assert set(counted) == inputs
    assert [name for name, n in counted.items() if n != 1] == []
    seen: defaultdict[str, int] = defaultdict(int)
    for m in broker.read_all(j.config.job.output):
        if m.value().startswith(b"seen:"):
            seen[m.value().decode()] += 1
    assert len(seen) == sent and set(seen.values()) == {1}
