"""Formats and further output topics on the task runtime (real broker, real RocksDB):
an active task decodes records, encodes outputs (pairs and Outputs, each with the
input's timestamp) to two output topics, sends a record that does not decode to the
dead-letter topic, and a warmup rebuilds the same state, from the input (the same
records decoded the same way, the poison one skipped) or from the changelog."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire.changelog import changelog_topic
from orchestrator.wire.config import parse_config
from orchestrator.wire.protocol import HeartbeatReply, RoleListing
from processor.runtime import TaskRuntime
from processor.runtime.dead_letters import dlq_topic
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

_TASK = "Partition 0"


def _reply(model: dict[str, list[str]], active: list[str] = (), warmup: list[str] = ()
           ) -> HeartbeatReply:
    return HeartbeatReply(alive=True, tasks=model, changelog={_TASK: 0},
                          assignment=RoleListing(active=list(active), warmup=list(warmup)))


def _runtime(raw: dict[str, Any], tmp_path: Path, name: str) -> TaskRuntime:
    raw = {**raw, "processor": {**raw["processor"], "state_dir": str(tmp_path / name)}}
    return TaskRuntime(parse_config(raw), name)


@pytest.mark.parametrize("source", ["input", "changelog"])
def test_formats_outputs_and_a_poison_record_through_a_handoff(broker, job_config, unique,
                                                               tmp_path, source) -> None:
    alerts = broker.create_topic(unique("alerts"), 1)
    raw = job_config(partitions=1, job={
        "class": "tests.processor.api_jobs:JsonTotals", "outputs": [alerts],
        "key_format": "str", "value_format": "json",
        "params": {"limit": 20, "alerts": alerts}}, processor={"on_error": "dlq"},
        catch_up={"source": source})
    config = parse_config(raw)
    if source == "changelog":       # the coordinator creates it; here, the test
        broker.create_topic(changelog_topic(config.job.name), 1)
    topic, output, name = config.job.inputs[0], config.job.output, config.job.name
    model = {_TASK: [f"{topic}:0"]}
    producer = broker.producer()
    base_ts = int(time.time() * 1000) - 60_000
    for i in range(20):
        value = b"{not json" if i == 7 else b'{"n": %d}' % i
        producer.produce(topic, key=b"k%d" % (i % 2), value=value, timestamp=base_ts + i)
    producer.flush(30)
    old, new = _runtime(raw, tmp_path, "p1"), _runtime(raw, tmp_path, "p2")
    try:
        old.apply(_reply(model, active=[_TASK]))
        wait_for(lambda: _TASK in old.active and old.active[_TASK].committed.get(
            f"{topic}:0") == 20, 60, "the owner to process", lambda: old.poll(0.05))
        wait_for(lambda: new.consumers.lookups.committed([f"{topic}:0"]) == {f"{topic}:0": 20}, 60,
                 "the owner's commit to be visible", lambda: old.poll(0.05))
        owner_state = dict(old.active[_TASK].store.state.items())
        new.apply(_reply(model, warmup=[_TASK]))
        wait_for(lambda: _TASK in new.replicas and new.replicas[_TASK].caught_up()
                 and dict(new.replicas[_TASK].store.state.items()) == owner_state, 60,
                 "the warmup", lambda: new.poll(0.05))
        old.driver.release(_TASK)
        new.apply(_reply(model, active=[_TASK]))
        wait_for(lambda: _TASK in new.active, 60, "activation", lambda: new.poll(0.05))
        assert dict(new.active[_TASK].store.state.items()) == owner_state
    finally:
        old.close(commit=True)
        new.close(commit=True)
    evens, odds = sum(range(0, 20, 2)), sum(range(1, 20, 2)) - 7
    assert owner_state == {"k0": evens, "k1": odds}
    totals = broker.read_all(output)
    assert len(totals) == 19                              # all but the poison record
    assert (totals[-1].key(), totals[-1].value()) == (b"k1", b'{"total":%d}' % odds)
    assert [m.timestamp()[1] for m in totals] == [base_ts + i for i in range(20) if i != 7]
    running: dict[bytes, int] = {}
    expected = []
    for i in (i for i in range(20) if i != 7):
        key = b"k%d" % (i % 2)
        running[key] = running.get(key, 0) + i
        if running[key] > 20:
            expected.append((key, b'{"over":%d}' % running[key], base_ts + i))
    assert [(m.key(), m.value(), m.timestamp()[1])
            for m in broker.read_all(alerts)] == expected
    [dead] = broker.read_all(dlq_topic(name))
    assert dead.value() == b"{not json"
    assert b"the value is not json" in dict(dead.headers())["baton.error"]
