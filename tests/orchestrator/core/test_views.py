"""What operators read of the core (orchestrator/core/views.py): `baton plan` sizes
its moves by the records to copy, and status says why a job is not balanced yet."""

from __future__ import annotations

from orchestrator.core.views import pending, plan, status
from tests.orchestrator.core.coordinator_harness import (
    ALL,
    FakeProcessor,
    Harness,
    at,
    start_two,
)


def one_owner_at_1000_of_1200(h: Harness) -> None:
    """p1 owns every task, 1,000 records into inputs that hold 1,200 each."""
    p1 = FakeProcessor(h, "p1")
    p1.register()
    p1.positions = at(1000, *ALL)
    p1.beat()
    h.core.observe_offsets({f"in:{i}": 0 for i in range(4)},
                           {f"in:{i}": 1200 for i in range(4)}, {})


def test_plan_lists_moves_with_sizes() -> None:
    h = Harness()
    one_owner_at_1000_of_1200(h)
    result = plan(h.core.picture, ["p2"], [])
    assert len(result["moves"]) == 2
    assert {m["records"] for m in result["moves"]} == {1000}
    assert result["rate"]["source"] == "default"
    assert result["eta_seconds"] > 0
    assert status(h.core.picture)["tasks"][0]["lag"] == 200


def test_plan_sizes_a_changelog_catch_up_by_the_changelog_partition() -> None:
    h = Harness(catch_up_source="changelog")
    h.core.adopt_model(h.core.picture.model.with_changelog())
    one_owner_at_1000_of_1200(h)
    changelog = h.core.picture.model.changelog
    h.core.observe_offsets({f"baton.j.changelog:{n}": 10 for n in changelog.values()},
                           {f"baton.j.changelog:{n}": 10 + 50 * (n + 1)
                            for n in changelog.values()}, {})
    moves = plan(h.core.picture, ["p2"], [])["moves"]
    assert len(moves) == 2
    assert {m["records"] for m in moves} == {50 * (changelog[m["task"]] + 1) for m in moves}
    assert all(m["records"] < 1000 for m in moves), "the changelog, not the input, is copied"


def test_a_newcomer_without_tasks_keeps_the_job_unbalanced() -> None:
    """With tasks enough for everyone, a processor holding nothing yet (here
    p3: both warm-up slots are taken by p2's moves) is a pending reason, not balance."""
    h = Harness()
    p1, p2 = start_two(h)
    p3 = FakeProcessor(h, "p3")
    p3.register()
    assert "processor p3 joined and holds no task yet" in pending(h.core.picture)
    assert not status(h.core.picture)["balanced"]


def test_a_stalled_read_is_shown_and_keeps_the_job_unbalanced() -> None:
    """A processor reports a task's read stalled (processor/runtime/stalls.py): status
    names who and where, and the job is not balanced until the read moves again."""
    h = Harness()
    p1 = FakeProcessor(h, "p1")
    p1.register()
    p1.positions = at(1000, *ALL)
    p1.beat()
    assert not pending(h.core.picture)
    task = sorted(p1.roles)[0]
    partition = h.core.picture.model.tasks[task][0]
    p1.stalled = {task: [partition]}
    p1.beat()
    shown = status(h.core.picture)
    row = next(t for t in shown["tasks"] if t["name"] == task)
    assert row["stalled"] == [{"processor": "p1", "role": "active", "partitions": [partition]}]
    assert not shown["balanced"]
    assert f"task {task!r}: p1's active read of {partition} has stalled (being recovered)" \
        in shown["pending"]
    p1.stalled = {}
    p1.beat()
    assert status(h.core.picture)["balanced"]
    assert all(t["stalled"] == [] for t in status(h.core.picture)["tasks"])
