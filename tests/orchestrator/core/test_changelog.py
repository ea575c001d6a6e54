"""The changelog mapping and topic rules (pure), the model carrying the mapping across
splits and restarts, and the coordinator under catch_up.source = "changelog"."""

from __future__ import annotations

import pytest

from orchestrator.core.changelog import changelog_partitions, plan_changelog_topic
from orchestrator.core.grouping import expand, expansion_parents, group
from orchestrator.core.model import JobModel
from orchestrator.core.views import status
from tests.orchestrator.core.test_coordinator import (
    ALL,
    FakeProcessor,
    Harness,
    at,
    owners,
    start_two,
)

TOPIC = "baton.j.changelog"


# ---- the mapping -----------------------------------------------------------------------


def test_first_mapping_follows_task_order() -> None:
    assert changelog_partitions(["b", "a", "c"], {}) == {"b": 0, "a": 1, "c": 2}


def test_tasks_keep_their_partitions_and_new_ones_get_unused_partitions() -> None:
    previous = {"a": 0, "b": 3, "c": 1}
    assert changelog_partitions(["a", "b", "c", "d", "e"], previous) == {
        "a": 0, "b": 3, "c": 1, "d": 4, "e": 5}


def test_a_task_gone_keeps_its_partition_reserved() -> None:
    mapping = changelog_partitions(["a", "new"], {"a": 0, "gone": 1})
    assert mapping == {"a": 0, "gone": 1, "new": 2}
    assert len(set(mapping.values())) == len(mapping)


# ---- the topic ---------------------------------------------------------------------------


def test_a_missing_topic_is_created_with_one_partition_per_task() -> None:
    plan = plan_changelog_topic(TOPIC, None, None, {"a": 0, "b": 1, "c": 2}, 0)
    assert plan.create == 3 and plan.problem is None


@pytest.mark.parametrize("policy", ["delete", "", None])
def test_a_topic_that_is_not_compacted_is_refused(policy: str | None) -> None:
    plan = plan_changelog_topic(TOPIC, 4, policy, {"a": 0}, 0)
    assert plan.problem is not None and TOPIC in plan.problem
    assert "cleanup.policy=compact" in plan.problem


def test_compact_and_delete_is_accepted() -> None:
    plan = plan_changelog_topic(TOPIC, 2, "compact,delete", {"a": 0, "b": 1}, 2)
    assert plan == type(plan)()


def test_a_topic_smaller_than_the_partitions_written_is_refused() -> None:
    mapping = {"a": 0, "b": 1, "c": 2, "d": 3}
    plan = plan_changelog_topic(TOPIC, 2, "compact", mapping, 4)
    assert plan.problem is not None and TOPIC in plan.problem and "2 partition(s)" in plan.problem
    fresh = plan_changelog_topic(TOPIC, 2, "compact", mapping, 0)
    assert fresh.problem is not None and "write to 4" in fresh.problem


def test_new_tasks_grow_the_topic() -> None:
    plan = plan_changelog_topic(TOPIC, 4, "compact", {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4,
                                                      "f": 5}, 4)
    assert plan.grow_to == 6 and plan.problem is None and plan.create == 0
    back = JobModel.first([("in", 2)], "partition").with_changelog().without_changelog()
    assert back.changelog_written() == 2
    again = back.with_changelog()
    assert plan_changelog_topic(TOPIC, 2, "compact", again.changelog,
                                back.changelog_written()).grow_to == 4


# ---- the model -----------------------------------------------------------------------------


def test_with_changelog_bumps_the_generation_once() -> None:
    model = JobModel.first([("in", 4)], "partition")
    mapped = model.with_changelog()
    assert mapped.generation == model.generation + 1
    assert mapped.changelog == {f"Partition {n}": n for n in range(4)}
    assert mapped.with_changelog() is mapped


def test_the_mapping_survives_the_coordinator_stream() -> None:
    model = JobModel.first([("in", 3)], "partition")
    assert "changelog" not in model.to_record()          # old records stay as they were
    assert JobModel.from_record(model.to_record()).changelog == {}
    mapped = model.with_changelog()
    assert JobModel.from_record(mapped.to_record()) == mapped


def _expanded(model: JobModel, count: int) -> JobModel:
    grown = expand(model.grouping, [("in", count)])
    parents = expansion_parents(model.grouping, grown)
    return model.expanded(grown, parents, {p: 100 for p in parents.values()}).model


def test_a_split_gives_each_child_a_new_partition() -> None:
    model = _expanded(JobModel.first([("in", 2)], "partition").with_changelog(), 4)
    assert model.changelog == {"Partition 0": 0, "Partition 1": 1}   # expansion: same tasks
    split, splits = model.plan_split()
    assert {s.child for s in splits} == {"Partition 2", "Partition 3"}
    assert split.changelog == {"Partition 0": 0, "Partition 1": 1, "Partition 2": 2,
                               "Partition 3": 3}
    again = _expanded(split, 8).plan_split()[0]
    assert {t: again.changelog[t] for t in split.changelog} == split.changelog
    assert sorted(again.changelog.values()) == list(range(8))


def test_a_split_without_the_changelog_maps_nothing() -> None:
    model = _expanded(JobModel.first([("in", 2)], "partition"), 4)
    assert model.plan_split()[0].changelog == {}


def test_the_first_changelog_start_after_a_split_maps_the_children_too() -> None:
    split = _expanded(JobModel.first([("in", 2)], "partition"), 4).plan_split()[0]
    assert split.with_changelog().changelog == {f"Partition {n}": n for n in range(4)}
    assert group([("in", 4)], "partition").tasks[3].name == "Partition 3"


# ---- the coordinator -------------------------------------------------------------------------


def _changelog_harness() -> Harness:
    h = Harness(catch_up_source="changelog")
    h.core.picture.model = h.core.picture.model.with_changelog()
    h.sync()
    return h


def test_the_mapping_rides_with_the_model() -> None:
    h = _changelog_harness()
    p1 = FakeProcessor(h, "p1")
    full = p1.register()
    assert full.changelog == {t: n for n, t in enumerate(ALL)}
    current = h.core.heartbeat(p1.request().model_copy(update={"generation": full.generation}))
    assert current.same_model and current.changelog == {}
    assert h.stream["model"]["changelog"] == full.changelog


def test_changelog_lag_is_the_replicas_reported_lag() -> None:
    """Input positions do not decide a changelog replica's lag: what it reports does."""
    h = _changelog_harness()
    p1, p2 = start_two(h)
    moving = sorted(h.core.picture.handoffs)
    p2.beat()
    p2.positions = at(1000, *moving)     # input offsets the changelog carried: all there
    p2.lags = {t: 5000 for t in moving}
    p2.beat()
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"catching_up"}
    assert {x["lag"] for x in status(h.core.picture)["handoffs"]} == {5000}
    p2.lags = {t: 3 for t in moving}
    p2.beat()
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"releasing"}
    p1.beat()
    p1.beat()
    p2.beat()
    p2.beat()
    assert not h.core.picture.handoffs and {owners(h)[t] for t in moving} == {"p2"}


def test_a_changelog_replica_without_a_lag_is_never_caught_up() -> None:
    h = _changelog_harness()
    p1, p2 = start_two(h)
    moving = sorted(h.core.picture.handoffs)
    p2.beat()
    p2.positions = at(1000, *moving)
    p2.beat()
    assert {x.phase.value for x in h.core.picture.handoffs.values()} <= {"planned", "catching_up"}
    assert h.core.picture.lag(moving[0], "p2") is None


def test_a_retired_mapping_is_never_reused() -> None:
    """Changelog, then input (the partitions stop following the state), then changelog
    again: fresh partitions, after every partition ever used."""
    mapped = JobModel.first([("in", 2)], "partition").with_changelog()
    retired = mapped.without_changelog()
    assert retired.changelog == {} and retired.generation == mapped.generation + 1
    assert retired.without_changelog() is retired
    again = JobModel.from_record(retired.to_record()).with_changelog()
    assert again.changelog == {"Partition 0": 2, "Partition 1": 3}
    assert again.without_changelog().with_changelog().changelog == {"Partition 0": 4,
                                                                      "Partition 1": 5}


def test_status_names_the_source_and_each_tasks_partition() -> None:
    h = _changelog_harness()
    shown = status(h.core.picture)
    assert shown["catch_up_source"] == "changelog"
    assert [t["changelog_partition"] for t in shown["tasks"]] == [0, 1, 2, 3]
    assert "changelog_partition" not in status(Harness().core.picture)["tasks"][0]
