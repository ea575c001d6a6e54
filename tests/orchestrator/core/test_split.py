"""Split planning (pure): every scheme, idempotence, refusals, S2 from the ancestry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.grouping import SCHEMES, Grouping, expand, expansion_parents, group
from orchestrator.core.split import SplitError, plan_split
from orchestrator.wire.lineage import AncestorRange, ancestry, s2_partitions


def _expanded(scheme: str, before: list[tuple[str, int]],
              after: list[tuple[str, int]]) -> tuple[Grouping, dict[str, tuple[str, int]]]:
    first = group(before, scheme)
    grown = expand(first, after)
    barriers = {c: (p, 100) for c, p in expansion_parents(first, grown).items()}
    return grown, barriers


def test_partition_scheme_splits_per_partition() -> None:
    grown, barriers = _expanded("partition", [("events", 8)], [("events", 16)])
    after, splits = plan_split(grown, barriers)
    assert len(after.tasks) == 16
    one = next(s for s in splits if s.parent == "Partition 1")
    assert one.to_json() == {"parent": "Partition 1", "child": "Partition 9",
                             "partitions": ["events:9"], "s2": ["events:1", "events:9"]}
    assert {t.name: t.partitions for t in after.tasks}["Partition 1"] == ("events:1",)


def test_cogroup_child_takes_partitions_mod_new_count() -> None:
    grown, barriers = _expanded("cogroup", [("a", 4), ("b", 8)], [("a", 8), ("b", 8)])
    after, splits = plan_split(grown, barriers)
    five = next(s for s in splits if s.child == "Group 5")
    assert five.parent == "Group 1"
    assert five.partitions == ("a:5", "b:5")
    assert five.s2 == ("a:1", "a:5", "b:5")
    assert len(after.tasks) == 8


def test_ssp_added_partitions_become_tasks() -> None:
    grown, barriers = _expanded("ssp", [("events", 2)], [("events", 4)])
    _, splits = plan_split(grown, barriers)
    assert [(s.parent, s.child) for s in splits] == [("SSP events:0", "SSP events:2"),
                                                    ("SSP events:1", "SSP events:3")]


def test_nothing_to_split_before_an_expansion() -> None:
    for scheme in ("partition", "ssp", "cogroup"):
        plain = group([("events", 4), ("clicks", 2)], scheme)
        assert plan_split(plain, {}) == (plain, ())


def test_single_is_refused() -> None:
    grown, barriers = _expanded("single", [("events", 2)], [("events", 4)])
    with pytest.raises(SplitError, match="'single'"):
        plan_split(grown, barriers)


def test_new_topic_tasks_do_not_split_into_their_neighbours() -> None:
    first = group([("events", 4)], "partition")
    with_clicks = expand(first, [("events", 4), ("clicks", 2)])
    assert plan_split(with_clicks, {})[1] == ()


def test_two_expansions_chain_the_ancestry() -> None:
    barriers = {"e:5": ("e:1", 10), "e:13": ("e:5", 70)}
    assert ancestry("e:13", barriers) == [AncestorRange("e:1", 10, "e:13"),
                                          AncestorRange("e:5", 70, "e:13")]
    assert s2_partitions(["e:13"], barriers) == ["e:1", "e:5", "e:13"]


def test_barrier_cycle_is_an_error() -> None:
    with pytest.raises(ValueError, match="cycle"):
        ancestry("e:1", {"e:1": ("e:2", 1), "e:2": ("e:1", 1)})


@given(scheme=st.sampled_from([s for s in SCHEMES if s != "single"]),
       counts=st.lists(st.integers(1, 4), min_size=1, max_size=3),
       factors=st.lists(st.integers(1, 3), min_size=3, max_size=3))
def test_split_properties(scheme: str, counts: list[int], factors: list[int]) -> None:
    before = [(f"t{i}", n) for i, n in enumerate(counts)]
    after_inputs = [(t, n * factors[i]) for i, (t, n) in enumerate(before)]
    grown, barriers = _expanded(scheme, before, after_inputs)
    after, splits = plan_split(grown, barriers)
    held = {t.name: set(t.partitions) for t in grown.tasks}
    for split in splits:
        assert set(split.partitions) <= held[split.parent]      # state is all in the parent
        assert split.s2[-len(split.partitions):] == split.partitions
    assert sorted(p for t in after.tasks for p in t.partitions) == sorted(
        p for t in grown.tasks for p in t.partitions)            # nothing lost or doubled
    assert plan_split(after, barriers) == (after, ())            # idempotent
    if scheme == "ssp" or len(before) == 1:
        # one input (or ssp): a split reaches the fresh grouping; with several inputs grown
        # by different factors a fresh task may straddle two current tasks and stays put
        assert len(after.tasks) == len(group(after_inputs, scheme).tasks)
