"""A task store damaged on disk while its processor is stopped: bytes overwritten in a
table file are found when the restarted processor opens the store, the directory is
moved aside (kept, named with the time), and the task's state is rebuilt from its input,
never served: the running-sum oracle holds over everything produced before and after.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.wire.config import load_config
from store.paths import task_store_path
from tests.feeder import Feeder
from tests.oracle_report import oracle_check
from tests.orchestrator.test_e2e import processor_config
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


def damage_a_table_file(store: Path) -> Path:
    """Overwrite 64 bytes a quarter into the store's largest .sst (inside a data block)."""
    table = max(store.glob("*.sst"), key=lambda p: p.stat().st_size)
    with table.open("r+b") as f:
        f.seek(table.stat().st_size // 4)
        f.write(b"\xa5" * 64)
    return table


def test_a_store_damaged_while_stopped_is_moved_aside_and_rebuilt(job, broker) -> None:
    j = job()
    j.start_coordinator()
    p1 = j.start_processor("p1")
    wait_for(lambda: len(j.holding().get("p1", [])) == 4, 60, "p1 holds every task")
    before = Feeder(broker, j.config.job.inputs[0], keys=40, rate=400.0).start()
    wait_for(lambda: before.sent >= 1200, 30, "some traffic")
    sent = before.stop()
    wait_for(lambda: j.all_consumed(sent), 60, f"all {sent} records consumed")
    task = sorted(j.holding()["p1"])[0]
    assert p1.stop() == 0, p1.log()[-3000:]       # a clean stop flushes the memtables
    config = processor_config(j.path, "p1")
    store = task_store_path(load_config(config).state_dir, j.config.job.name, task, "p1")
    damaged = damage_a_table_file(store)

    again = j.daemons("p1-restarted", "processor", "-c", config, "--id", "p1")
    j.processors["p1"] = again
    wait_for(lambda: len(j.holding().get("p1", [])) == 4 and j.balanced(), 60,
             "the restarted p1 holds every task")
    after = Feeder(broker, j.config.job.inputs[0], keys=40, rate=400.0).start()
    wait_for(lambda: after.sent >= 400, 30, "traffic after the restart")
    sent += after.stop()
    wait_for(lambda: j.all_consumed(sent), 60, f"all {sent} records consumed")
    j.check_running()

    aside = [p for p in store.parent.iterdir() if p.name.startswith(f"{store.name}+corrupt-")]
    assert len(aside) == 1, sorted(p.name for p in store.parent.iterdir())
    assert b"\xa5" * 64 in (aside[0] / damaged.name).read_bytes()     # kept as it was
    log = again.log()
    assert f"task {task!r}: damaged store moved to {aside[0]}, not served" in log, log[-3000:]
    assert f"task store {store} is corrupt" in log, log[-3000:]
    result = oracle_check(broker, j.config)
    assert result.ok, result
    assert result.records_in == sent
