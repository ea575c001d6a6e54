"""Side effects after commit on the task runtime (real broker, Spark, RocksDB): a
warmup through the Spark bulk path and the activation's replay T2 -> T1 run no effect
(`context.replaying` is true on both); the old owner ran each of its records' effects
once, the new owner each of the records it processed live."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from orchestrator.wire.config import parse_config
from processor.runtime import TaskRuntime
from tests.processor.effect_jobs import read_ledger
from tests.processor.runtime.runtime_support import (
    assignment_reply,
    feed_keys,
    new_runtime,
    task_model,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

_TASK = "Partition 0"


def test_no_effect_from_a_spark_warmup_nor_the_activation_replay(spark, broker, job_config,
                                                                  tmp_path: Path) -> None:
    raw = job_config(partitions=1, job={"class": "tests.processor.effect_jobs:EffectSum",
                                        "params": {"effects_dir": str(tmp_path)}},
                     catch_up={"bulk_threshold": 300}, spark={"master": "local[2]"})
    topic = parse_config(raw).job.inputs[0]
    partition = f"{topic}:0"
    model = task_model(topic, 1)
    old, new = new_runtime(raw, tmp_path, "p1"), new_runtime(raw, tmp_path, "p2")

    def committed(runtime: TaskRuntime, offset: int) -> bool:
        active = runtime.active.get(_TASK)
        return active is not None and active.committed.get(partition) == offset

    def both() -> None:
        old.poll(0.05)
        new.poll(0.05)

    try:
        feed_keys(broker, topic, 0, 1000)
        old.apply(assignment_reply(model, active=[_TASK]))
        wait_for(lambda: committed(old, 1000), 90, "p1 to process 1000", lambda: old.poll(0.05))
        wait_for(lambda: new.consumers.lookups.committed([partition]) == {partition: 1000},
                 60, "p1's commit to be visible", lambda: old.poll(0.05))
        new.apply(assignment_reply(model, warmup=[_TASK]))
        assert _TASK in new.bulk, "the warmup should take the Spark path"
        wait_for(lambda: not new.bulk.busy and new.replicas[_TASK].caught_up(), 240,
                 "the bulk catch-up", both)
        # 50 more that only p1 processes: p2's activation replays them (T2 -> T1)
        feed_keys(broker, topic, 1000, 50)
        wait_for(lambda: committed(old, 1050), 60, "p1 to process 50 more",
                 lambda: old.poll(0.05))
        old.driver.release(_TASK)
        new.apply(assignment_reply(model, active=[_TASK]))
        wait_for(lambda: _TASK in new.active, 60, "the activation", lambda: new.poll(0.05))
        feed_keys(broker, topic, 1050, 100)
        wait_for(lambda: committed(new, 1150), 60, "p2 to process 100",
                 lambda: new.poll(0.05))
    finally:
        old.close(commit=True)
        new.close(commit=True)
    where = [f"{partition}@{o}" for o in range(1150)]
    p1, p2 = read_ledger(tmp_path, "p1"), read_ledger(tmp_path, "p2")
    assert Counter(p1.done) == Counter(where[:1050])              # each once, on p1
    assert Counter(p2.done) == Counter(where[1050:])              # each once, on p2
    assert set(p2.live) == set(where[1050:])
    assert set(where[1000:1050]) <= set(p2.replayed)              # the activation's replay
    executors = [read_ledger(tmp_path, f.stem) for f in tmp_path.glob("spark-*.seen")]
    assert executors, "the Spark fold left no ledger"
    folded = {w for e in executors for w in e.replayed}
    assert set(where[:1000]) <= folded                            # the bulk run replayed
    assert not [w for e in executors for w in e.live + e.done + e.begun]
