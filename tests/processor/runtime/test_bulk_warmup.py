"""A scale-out whose warmup goes through the Spark bulk path, then hands over under
traffic: the running-sum oracle holds and the catch-up metric shows the Spark path."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from metrics import ProcessorMetrics
from orchestrator.wire.config import parse_config
from tests.feeder import Feeder
from tests.oracle_report import oracle_check
from tests.processor.runtime.runtime_support import (
    assignment_reply,
    consumed_to,
    new_runtime,
    task_model,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_warmup_through_spark_then_handoff(spark, broker, job_config, tmp_path: Path) -> None:
    raw = job_config(partitions=2, catch_up={"bulk_threshold": 500},
                     spark={"master": "local[2]"})
    config = parse_config(raw)
    topic = config.job.inputs[0]
    model = task_model(topic, 2)
    old = new_runtime(raw, tmp_path, "p1")
    registry = CollectorRegistry()
    new = new_runtime(raw, tmp_path, "p2",
                      metrics=ProcessorMetrics(registry, config.job.name, "p2"))
    feeder = Feeder(broker, topic, keys=30, rate=3000).start()
    try:
        old.apply(assignment_reply(model, active=list(model)))
        wait_for(lambda: sum(a.records_total for a in old.active.values()) > 6000, 90,
                 "a backlog for the warmup", lambda: old.poll(0.05))
        new.apply(assignment_reply(model, warmup=["Partition 0"]))
        assert "Partition 0" in new.bulk, "the warmup should take the Spark path"

        def both() -> None:
            old.poll(0.05)
            new.poll(0.05)

        wait_for(lambda: not new.bulk.busy and new.replicas["Partition 0"].lag() < 300, 180,
                 "the bulk catch-up and the tail", both)
        spark_records = registry.get_sample_value(
            "baton_catchup_records_total",
            {"job": config.job.name, "processor": "p2", "task": "Partition 0", "path": "spark",
             "source": "input"})
        assert spark_records and spark_records > 500
        old.driver.release("Partition 0")
        old.apply(assignment_reply(model, active=["Partition 1"]))
        new.apply(assignment_reply(model, active=["Partition 0"]))
        wait_for(lambda: "Partition 0" in new.active, 60, "activation", both)
        sent = feeder.stop()
        wait_for(lambda: consumed_to([old, new], sent), 120, "all consumed", both)
    finally:
        feeder.stop()
        old.close(commit=True)
        new.close(commit=True)
    result = oracle_check(broker, config)
    assert result.records_in == sent
    assert result.ok, result
