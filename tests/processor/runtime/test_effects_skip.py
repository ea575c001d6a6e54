"""Side effects after commit on the task runtime (real broker, RocksDB): a record whose
process() raised drops the effect it asked for, and the batch it was in, undone and
processed again record by record, asks for its other records' effects once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from orchestrator.wire.config import parse_config
from tests.processor.effect_jobs import POISON, read_ledger
from tests.processor.runtime.runtime_support import assignment_reply, new_runtime, task_model
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

_TASK = "Partition 0"


def test_a_skipped_record_drops_its_effect_and_its_batch_asks_once(broker, job_config,
                                                                     tmp_path: Path) -> None:
    raw = job_config(partitions=1, job={"class": "tests.processor.effect_jobs:EffectSum",
                                        "params": {"effects_dir": str(tmp_path)}},
                     processor={"on_error": "skip"})
    topic = parse_config(raw).job.inputs[0]
    partition = f"{topic}:0"
    producer = broker.producer()
    for i in range(200):            # in one poll batch, the poison in its middle
        producer.produce(topic, key=POISON if i == 100 else b"k%d" % (i % 5), value=b"1",
                         partition=0)
    assert producer.flush(30) == 0
    runtime = new_runtime(raw, tmp_path, "p1")
    try:
        runtime.apply(assignment_reply(task_model(topic, 1), active=[_TASK]))
        wait_for(lambda: _TASK in runtime.active
                 and runtime.active[_TASK].committed.get(partition) == 200, 60,
                 "the task to process 200", lambda: runtime.poll(0.05))
    finally:
        runtime.close(commit=True)
    ledger = read_ledger(tmp_path, "p1")
    assert Counter(ledger.done) == Counter(f"{partition}@{o}" for o in range(200) if o != 100)
    assert ledger.live.count(f"{partition}@0") == 2    # the batch, then record by record
