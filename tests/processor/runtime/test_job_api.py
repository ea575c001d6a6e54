"""The Job API on the task runtime (real broker, real RocksDB): headers in, Outputs
with headers and the input's timestamp out, [job.params], setup/close per task and
role, and state changed in place surviving a handoff through a warmup's replay."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire.config import parse_config
from orchestrator.wire.protocol import HeartbeatReply, RoleListing
from processor.runtime import TaskRuntime
from tests.processor.api_jobs import HookedSum
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

_TASK = "Partition 0"


def _reply(model: dict[str, list[str]], active: list[str] = (), warmup: list[str] = ()
           ) -> HeartbeatReply:
    return HeartbeatReply(alive=True, tasks=model,
                          assignment=RoleListing(active=list(active), warmup=list(warmup)))


def _runtime(raw: dict[str, Any], tmp_path: Path, name: str) -> TaskRuntime:
    raw = {**raw, "processor": {**raw["processor"], "state_dir": str(tmp_path / name)}}
    return TaskRuntime(parse_config(raw), name)


def test_headers_outputs_params_and_hooks_through_a_handoff(broker, job_config,
                                                              tmp_path) -> None:
    raw = job_config(partitions=1, job={"class": "tests.processor.api_jobs:HookedSum",
                                        "params": {"scale": 3}})
    config = parse_config(raw)
    topic, output = config.job.inputs[0], config.job.output
    model = {_TASK: [f"{topic}:0"]}
    producer = broker.producer()
    base_ts = int(time.time() * 1000) - 60_000     # recent: retention keeps the records
    for i in range(30):
        producer.produce(topic, key=b"k%d" % (i % 3), value=b"1", timestamp=base_ts + i,
                         headers=[("src", b"s%d" % i)])
    producer.flush(30)
    HookedSum.calls = []
    old, new = _runtime(raw, tmp_path, "p1"), _runtime(raw, tmp_path, "p2")
    try:
        old.apply(_reply(model, active=[_TASK]))
        wait_for(lambda: _TASK in old.active and old.active[_TASK].committed.get(
            f"{topic}:0") == 30, 60, "the owner to process", lambda: old.poll(0.05))
        # the warmup's cap is the group's committed offset when it starts: wait until
        # the broker shows the owner's last commit
        wait_for(lambda: new.consumers.lookups.committed([f"{topic}:0"]) == {f"{topic}:0": 30}, 60,
                 "the owner's commit to be visible", lambda: old.poll(0.05))
        new.apply(_reply(model, warmup=[_TASK]))
        wait_for(lambda: _TASK in new.replicas and new.replicas[_TASK].caught_up()
                 and new.replicas[_TASK].applied_total == 30, 60, "the warmup",
                 lambda: new.poll(0.05))
        old.driver.release(_TASK)
        new.apply(_reply(model, active=[_TASK]))
        wait_for(lambda: _TASK in new.active, 60, "activation", lambda: new.poll(0.05))
        assert new.active[_TASK].store.state.get(b"k0") == {
            "total": 30, "sources": [f"s{i}" for i in range(0, 30, 3)]}
    finally:
        old.close(commit=True)
        new.close(commit=True)
    outputs = broker.read_all(output)
    assert len(outputs) == 30                       # the warmup's outputs were discarded
    first, last = outputs[0], outputs[-1]
    assert (first.key(), first.value(), first.timestamp()[1]) == (b"k0", b"3", base_ts)
    assert first.headers() == [("src", b"s0"), ("scale", b"3")]
    assert (last.key(), last.value(), last.timestamp()[1]) == (b"k2", b"30", base_ts + 29)
    partitions = (f"{topic}:0",)
    assert HookedSum.calls == [
        ("setup", "p1", _TASK, "activating", partitions),
        ("setup", "p2", _TASK, "warmup", partitions),
        ("close", "p1", _TASK),
        ("close", "p2", _TASK)]
