"""Retention that removed input a replica needs (Apache Kafka's DeleteRecords, as
retention does it): the replay refuses to build the state from what is left, says which
partition and where it now starts, and names the changelog source as the way out; the
task is reported failed, never caught up, and counted for the alert. The same on the
Spark path. A job that began on an already trimmed input is not refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from metrics import ProcessorMetrics
from orchestrator.wire.config import parse_config
from orchestrator.wire.partitions import format_partition
from processor.retention import InputTrimmedError
from processor.runtime.task_runtime import TaskRuntime
from tests.brokers import Broker
from tests.processor.runtime.runtime_support import assignment_reply, new_runtime, task_model
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

TASK = "Partition 0"


def _produce(broker: Broker, topic: str, count: int) -> None:
    producer = broker.producer()
    for i in range(count):
        producer.produce(topic, key=f"k{i % 10}".encode(), value=str(i % 9 + 1).encode())
    assert producer.flush(30) == 0


def _delete_before(broker: Broker, partition: str, offset: int) -> None:
    topic, number = partition.rsplit(":", 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, int(number), offset)]).values():
        assert future.result(30).low_watermark == offset


def _owner_commits(owner: TaskRuntime, partition: str, offset: int) -> None:
    wait_for(lambda: TASK in owner.active
             and owner.active[TASK].committed.get(partition, 0) >= offset, 60,
             f"the owner to commit {partition} up to {offset}", lambda: owner.poll(0.05))


def _warm_then_leave(replica: TaskRuntime, model: dict[str, list[str]]) -> None:
    """A warmup catches up to the owner's T1, then is dropped (its store stays)."""
    replica.apply(assignment_reply(model, warmup=[TASK]))
    wait_for(lambda: replica.replicas[TASK].caught_up(), 60, "the warmup to catch up",
             lambda: replica.poll(0.05))
    replica.apply(assignment_reply(model))
    assert TASK not in replica.replicas


def _gap_errors(registry: CollectorRegistry, job: str) -> float | None:
    return registry.get_sample_value("baton_catchup_gap_errors_total",
                                     {"job": job, "processor": "p2", "task": TASK})


def _assert_refused(replica: TaskRuntime, partition: str, needed: int, first: int) -> None:
    error = replica.failed[TASK]
    assert f"input partition {partition} no longer holds offset {needed}" in error
    assert f"first offset still there is {first}" in error
    assert '[catch_up] source = "changelog"' in error
    assert TASK not in replica.replicas
    reports = [r for r in replica.reports() if r.task == TASK]
    assert [r.role for r in reports] == ["failed"]


@pytest.fixture
def trimmed(broker: Broker, job_config: Any, tmp_path: Path) -> Any:
    """An owner at T1 = 600 on a one-partition job, and a replica runtime p2 whose store
    was left at T2 = 300; the input then trimmed to start at 450."""
    raw = job_config(partitions=1)
    config = parse_config(raw)
    partition = format_partition(config.job.inputs[0], 0)
    model = task_model(config.job.inputs[0], 1)
    registry = CollectorRegistry()
    owner = new_runtime(raw, tmp_path, "p1")
    replica = new_runtime(raw, tmp_path, "p2",
                          metrics=ProcessorMetrics(registry, config.job.name, "p2"))
    try:
        owner.apply(assignment_reply(model, active=[TASK]))
        _produce(broker, config.job.inputs[0], 300)
        _owner_commits(owner, partition, 300)
        _warm_then_leave(replica, model)
        _produce(broker, config.job.inputs[0], 300)
        _owner_commits(owner, partition, 600)
        _delete_before(broker, partition, 450)
        yield config, model, partition, replica, registry
    finally:
        owner.close(commit=True)
        replica.close(commit=False)


def test_a_warmup_from_a_trimmed_checkpoint_fails_naming_the_partition(trimmed) -> None:
    config, model, partition, replica, registry = trimmed
    replica.apply(assignment_reply(model, warmup=[TASK]))
    _assert_refused(replica, partition, 300, 450)
    assert _gap_errors(registry, config.job.name) == 1
    for _ in range(20):                         # it stays failed, never catching up
        replica.poll(0.05)
    _assert_refused(replica, partition, 300, 450)


def test_a_replay_whose_start_is_trimmed_under_it_fails_too(trimmed, monkeypatch) -> None:
    """The start check passed (as when retention runs just after it): the replay
    consumer's fetch below the first offset is an error, never a jump to it."""
    import processor.runtime.catch_up as catch_up

    config, model, partition, replica, registry = trimmed
    monkeypatch.setattr(catch_up, "check_retained", lambda *args: None)
    replica.apply(assignment_reply(model, warmup=[TASK]))
    assert TASK in replica.replicas             # started from T2 = 300
    wait_for(lambda: TASK in replica.failed, 30, "the replay to refuse the gap",
             lambda: replica.poll(0.05))
    _assert_refused(replica, partition, 300, 450)
    assert _gap_errors(registry, config.job.name) == 1


def test_a_job_started_on_trimmed_input_warms_up(broker: Broker, job_config: Any,
                                                  tmp_path: Path) -> None:
    """No committed offset: the owner starts at the first offset still there, and a new
    warmup from that offset needs nothing that is gone."""
    raw = job_config(partitions=1)
    config = parse_config(raw)
    partition = format_partition(config.job.inputs[0], 0)
    model = task_model(config.job.inputs[0], 1)
    _produce(broker, config.job.inputs[0], 200)
    _delete_before(broker, partition, 120)
    owner, replica = new_runtime(raw, tmp_path, "p1"), new_runtime(raw, tmp_path, "p2")
    try:
        owner.apply(assignment_reply(model, active=[TASK]))
        _owner_commits(owner, partition, 200)
        assert owner.active[TASK].records_total == 80
        replica.apply(assignment_reply(model, warmup=[TASK]))
        wait_for(lambda: TASK in replica.replicas and replica.replicas[TASK].caught_up(), 60,
                 "the warmup to catch up", lambda: replica.poll(0.05))
        assert replica.replicas[TASK].applied_total == 80
        assert not replica.failed
    finally:
        owner.close(commit=True)
        replica.close(commit=False)


@pytest.mark.spark
def test_the_spark_path_refuses_a_trimmed_range(spark, broker: Broker, unique: Any) -> None:
    from processor.spark.bulk import bulk_catch_up

    topic = broker.create_topic(unique("events"), 1)
    _produce(broker, topic, 100)
    _delete_before(broker, f"{topic}:0", 40)
    with pytest.raises(InputTrimmedError) as refused:
        bulk_catch_up(spark, "processor.examples:RunningSum", broker.settings(),
                      {f"{topic}:0": (10, 100)}, "input", TASK)
    assert (refused.value.partition, refused.value.needed, refused.value.first) == (
        f"{topic}:0", 10, 40)
    assert "changelog" in str(refused.value)
