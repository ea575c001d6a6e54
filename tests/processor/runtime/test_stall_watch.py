"""The stall watchdog (processor/runtime/stall_watch.py) on a real broker: a consumer made
to stop fetching one partition behind the runtime's back (paused on the client itself,
which the runtime never does to an active partition) while records keep coming is found
stalled within `stall_timeout_ms` and a look, reported so, counted, and recovered; the
running-sum oracle holds over the whole output.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from metrics import ProcessorMetrics
from orchestrator.wire.config import parse_config
from processor.runtime import TaskRuntime
from processor.runtime.batches import topic_partition
from tests.brokers import Broker
from tests.oracle_report import oracle_check
from tests.processor.runtime.runtime_support import (
    assignment_reply,
    consumed_to,
    feed_keys,
    new_runtime,
    task_model,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.smoke]

TIMEOUT_MS = 2000
# a look comes every tenth of the timeout; one heartbeat (the daemon's default) carries
# the report to the coordinator
HEARTBEAT_S = 1.0


def _stalls(registry: CollectorRegistry, role: str) -> float:
    total = 0.0
    for family in registry.collect():
        if family.name == "baton_task_stalls":
            total += sum(s.value for s in family.samples
                         if s.name.endswith("_total") and s.labels["role"] == role)
    return total


def _stalled(runtime: TaskRuntime) -> dict[str, list[str]]:
    return {r.task: r.stalled for r in runtime.reports() if r.stalled}


def _until_stalled(runtime: TaskRuntime, fed_at: float) -> float:
    """Poll until a report says stalled; the seconds since the records came."""
    wait_for(lambda: bool(_stalled(runtime)), 30, "a stall reported",
             lambda: runtime.poll(0.05))
    return time.monotonic() - fed_at


def test_an_active_read_that_stops_is_found_recovered_and_loses_nothing(
        broker: Broker, job_config: Callable[..., dict[str, Any]], tmp_path: Path) -> None:
    raw = job_config(partitions=2, processor={"stall_timeout_ms": TIMEOUT_MS})
    config = parse_config(raw)
    topic = config.job.inputs[0]
    registry = CollectorRegistry()
    runtime = new_runtime(raw, tmp_path, "p1",
                          metrics=ProcessorMetrics(registry, config.job.name, "p1"))
    try:
        runtime.apply(assignment_reply(task_model(topic, 2), active=["Partition 0",
                                                                     "Partition 1"]))
        feed_keys(broker, topic, 0, 200)
        wait_for(lambda: consumed_to([runtime], 200), 60, "the first records",
                 lambda: runtime.poll(0.05))
        # behind the runtime's back: the client stops fetching partition 0 of the input
        runtime.active_consumer.pause([topic_partition(f"{topic}:0")])
        for _ in range(20):
            runtime.poll(0.01)
        feed_keys(broker, topic, 200, 200)
        took = _until_stalled(runtime, time.monotonic())
        assert took <= TIMEOUT_MS / 1000 + HEARTBEAT_S, f"found after {took:.1f} s"
        assert _stalled(runtime) == {"Partition 0": [f"{topic}:0"]}
        assert _stalls(registry, "active") == 1
        wait_for(lambda: consumed_to([runtime], 400), 60, "every record after the recovery",
                 lambda: runtime.poll(0.05))
        for _ in range(30):             # a look after the read moved clears the stall
            runtime.poll(0.01)
            time.sleep(0.01)
        assert _stalled(runtime) == {}
        assert _stalls(registry, "active") == 1
    finally:
        runtime.close(commit=True)
    result = oracle_check(broker, config)
    assert result.records_in == 400
    assert result.ok, result


def test_a_warmup_read_that_stops_is_found_and_recovered(
        broker: Broker, job_config: Callable[..., dict[str, Any]], tmp_path: Path) -> None:
    """The warmup's consumer stops fetching while the owner commits on: found (its cap
    moved past where it stands), recovered, and the warmup reaches the owner's offsets."""
    raw = job_config(partitions=1, processor={"stall_timeout_ms": TIMEOUT_MS})
    config = parse_config(raw)
    topic = config.job.inputs[0]
    model = task_model(topic, 1)
    registry = CollectorRegistry()
    owner = new_runtime(raw, tmp_path, "p1")
    newcomer = new_runtime(raw, tmp_path, "p2",
                           metrics=ProcessorMetrics(registry, config.job.name, "p2"))
    both = (owner, newcomer)
    partition = f"{topic}:0"
    capped: list[float] = []    # when the warmup's cap first moved past the first 200

    def poll() -> None:
        for runtime in both:
            runtime.poll(0.02)
        replica = newcomer.replicas.get("Partition 0")
        if not capped and replica is not None and replica.caps[partition] > 200:
            capped.append(time.monotonic())

    try:
        owner.apply(assignment_reply(model, active=["Partition 0"]))
        feed_keys(broker, topic, 0, 200)
        wait_for(lambda: consumed_to([owner], 200), 60, "the owner's first records", poll)
        newcomer.apply(assignment_reply(model, warmup=["Partition 0"]))
        # behind the runtime's back, before its first fetch (a partition the runtime
        # paused at its cap itself would be resumed by it when the cap moves)
        newcomer.consumers.replays.replay.pause([topic_partition(f"{topic}:0")])
        for _ in range(20):
            poll()
        assert newcomer.replicas["Partition 0"].positions[partition] < 200
        feed_keys(broker, topic, 200, 200)
        wait_for(lambda: bool(_stalled(newcomer)), 30, "the warmup's stall reported", poll)
        # from the moment its target (the cap: the owner's T1, followed as the owner
        # commits the new records) moved past it, not from the records' arrival: how
        # soon the owner commits them is not the watch's
        assert capped, "reported stalled before its cap moved past it"
        took = time.monotonic() - capped[0]
        assert took <= TIMEOUT_MS / 1000 + HEARTBEAT_S, f"found after {took:.1f} s"
        assert _stalls(registry, "warmup") == 1
        wait_for(lambda: consumed_to([owner], 400)
                 and newcomer.replicas["Partition 0"].positions[f"{topic}:0"]
                 >= owner.active["Partition 0"].committed[f"{topic}:0"], 60,
                 "the warmup level with the owner again", poll)
        for _ in range(30):
            poll()
            time.sleep(0.01)
        assert _stalled(newcomer) == {}
    finally:
        for runtime in both:
            runtime.close(commit=True)
    result = oracle_check(broker, config)
    assert result.ok, result
