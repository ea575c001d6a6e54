"""A transaction timeout above Apache Kafka's `transaction.max.timeout.ms` (900000 by
default): the processor does not start (exit 2) and says both values, instead of every
task's activation failing on every processor in turn; a runtime that got past the start
anyway fails the task with the same words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire.config import parse_config
from tests.processor.runtime.runtime_support import assignment_reply, new_runtime, task_model
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

TOO_LONG = {"transaction.timeout.ms": 900_001}
BOTH = ("transaction.timeout.ms = 900001", "transaction.max.timeout.ms = 900000")


def test_a_transaction_timeout_above_the_limit_stops_the_start(coordinated, daemons) -> None:
    _, path = coordinated(1, kafka=TOO_LONG)
    processor = daemons("p1", "processor", "-c", path, "--id", "p1")
    assert processor.wait(60) == 2, processor.log()[-3000:]
    log = processor.log()
    assert all(value in log for value in BOTH), log[-3000:]
    assert str(path) in log


def test_an_activation_refused_for_it_names_both_values(job_config: Any,
                                                        tmp_path: Path) -> None:
    raw = job_config(partitions=1, kafka=TOO_LONG)
    config = parse_config(raw)
    runtime = new_runtime(raw, tmp_path, "p1")
    try:
        runtime.apply(assignment_reply(task_model(config.job.inputs[0], 1), active=["Partition 0"]))
        wait_for(lambda: "Partition 0" in runtime.failed, 60, "the activation to fail",
                 lambda: runtime.poll(0.05))
        error = runtime.failed["Partition 0"]
        assert all(value in error for value in BOTH), error
        assert not runtime.active
    finally:
        runtime.close(commit=False)
