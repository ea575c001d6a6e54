"""processor/runtime/reports.py: the roles a processor reports its tasks in, read without
building the reports (the loop rebuilds them at once only when these change), and the
reports built in those roles. Replicas over a real RocksDB store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.replica import Replay, ReplicaRole
from processor.runtime.reports import held_roles, task_reports
from store import TaskStore


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[dict[str, Replay]]:
    roles: dict[str, ReplicaRole] = {"t1": "warmup", "t2": "standby", "t3": "activating"}
    stores = [TaskStore(tmp_path / task) for task in roles]
    try:
        yield {task: Replay(task, [f"in:{n}"], store, role, {f"in:{n}": 5}, {f"in:{n}": 9})
               for n, (store, (task, role)) in enumerate(zip(stores, roles.items(), strict=True))}
    finally:
        for store in stores:
            store.close()


def test_every_task_in_the_role_its_report_gives(replicas: dict[str, Replay]) -> None:
    """A replaying activation is reported as its replica; a task still fencing as
    activating; a released task only while nothing else holds it; a failed one also
    beside another role (its reason is reported either way)."""
    activating = {"t3": object(), "t4": object()}     # t3 replays, t4 still fences
    released = {"t2": {"in:1": 4}, "t5": {"in:5": 7}}  # t2 is a standby again
    failed = {"t6": "store locked", "t1": "broker error"}
    roles = held_roles({}, replicas, activating, released, failed)
    assert roles == [("t1", "warmup"), ("t2", "standby"), ("t3", "activating"),
                     ("t4", "activating"), ("t5", "released"), ("t6", "failed"),
                     ("t1", "failed")]
    reports = task_reports({}, replicas, activating, released, failed)
    assert [(r.task, str(r.role)) for r in reports] == roles
    by_role = {(r.task, str(r.role)): r for r in reports}
    assert by_role["t1", "warmup"].lag == 4 and by_role["t3", "activating"].lag == 4
    assert by_role["t4", "activating"].lag is None       # fencing: no replica yet
    assert dict(by_role["t5", "released"].committed or {}) == {"in:5": 7}
    assert by_role["t6", "failed"].error == "store locked"


def test_a_role_change_changes_the_roles_and_nothing_else_does(
        replicas: dict[str, Replay]) -> None:
    before = set(held_roles({}, replicas, {}, {}, {}))
    replicas["t1"].positions["in:0"] = 8      # progress: the same roles
    assert set(held_roles({}, replicas, {}, {}, {})) == before
    replicas["t1"].role = "standby"           # a warmup made a standby
    assert set(held_roles({}, replicas, {}, {}, {})) == before - {("t1", "warmup")} | {
        ("t1", "standby")}
    gone = {t: r for t, r in replicas.items() if t != "t2"}
    assert set(held_roles({}, gone, {}, {"t2": {"in:1": 9}}, {})) == (
        before - {("t1", "warmup"), ("t2", "standby")} | {("t1", "standby"),
                                                           ("t2", "released")})
