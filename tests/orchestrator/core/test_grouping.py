"""Grouping schemes, fixed-task expansion, the JSON form and `baton group`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.cli.group import group_command
from orchestrator.core.grouping import (
    SCHEMES,
    Grouping,
    GroupingError,
    Task,
    expand,
    expansion_parents,
    group,
    mod_expansion,
    parse_partition,
    partition_to_tasks,
)


def names(grouping: Grouping) -> list[str]:
    return [t.name for t in grouping.tasks]


def members(grouping: Grouping) -> dict[str, tuple[str, ...]]:
    return {t.name: t.partitions for t in grouping.tasks}


# --- the SAMZA-71 examples and the schemes -------------------------------------------------

def test_ssp_two_inputs_eight_first_gives_twelve_tasks_in_input_order() -> None:
    grouping = group([("big", 8), ("small", 4)], "ssp")
    assert names(grouping) == [f"SSP big:{p}" for p in range(8)] + \
        [f"SSP small:{p}" for p in range(4)]
    assert all(t.partitions == (t.name.removeprefix("SSP "),) for t in grouping.tasks)


def test_partition_scheme_with_four_and_eight_gives_eight_tasks() -> None:
    grouping = group([("a", 4), ("b", 8)])
    assert grouping.scheme == "partition"
    assert names(grouping) == [f"Partition {n}" for n in range(8)]
    assert members(grouping)["Partition 3"] == ("a:3", "b:3")
    assert members(grouping)["Partition 4"] == ("b:4",)


def test_partition_scheme_lists_partitions_in_input_order() -> None:
    assert group([("z", 2), ("a", 2)]).tasks[0].partitions == ("z:0", "a:0")


def test_cogroup_of_eight_and_twelve_gives_four_tasks_by_p_mod_4() -> None:
    grouping = group([("a", 8), ("b", 12)], "cogroup")
    assert names(grouping) == ["Group 0", "Group 1", "Group 2", "Group 3"]
    assert members(grouping)["Group 1"] == ("a:1", "a:5", "b:1", "b:5", "b:9")
    for partition, tasks in partition_to_tasks(grouping).items():
        assert tasks == [f"Group {parse_partition(partition)[1] % 4}"]


def test_single_holds_everything() -> None:
    grouping = group([("a", 2), ("b", 1)], "single")
    assert grouping.tasks == (Task("Single", ("a:0", "a:1", "b:0")),)


def test_partition_to_tasks_is_in_input_order() -> None:
    assert list(partition_to_tasks(group([("b", 2), ("a", 1)]))) == ["b:0", "b:1", "a:0"]


@pytest.mark.parametrize(("inputs", "scheme", "words"), [
    ([("a", 1)], "bogus", ["unknown grouping scheme 'bogus'", "partition, ssp"]),
    ([], "partition", ["no inputs"]),
    ([("a", 0)], "partition", ["'a'", "0 partitions", "positive"]),
    ([("a", -3)], "ssp", ["'a'", "-3 partitions"]),
    ([("a", True)], "ssp", ["'a'", "True partitions"]),
    ([("a", 2), ("a", 4)], "partition", ["'a' is listed twice"]),
    ([("a:b", 2)], "partition", ["'a:b' is not a Kafka topic name"]),
    ([("", 2)], "partition", ["'' is not a Kafka topic name"]),
])
def test_bad_inputs_are_refused_clearly(inputs: list[tuple[str, int]], scheme: str,
                                        words: list[str]) -> None:
    with pytest.raises(GroupingError) as err:
        group(inputs, scheme)
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("text", ["a", "a:", ":1", "a:-1", "a:01", "a:x", "a:+1", "a:²"])
def test_parse_partition_refuses_non_canonical_spellings(text: str) -> None:
    with pytest.raises(GroupingError, match="not a partition"):
        parse_partition(text)


# --- fixed-task expansion ------------------------------------------------------------------

def test_expansion_two_to_four_pairs_0_2_and_1_3() -> None:
    previous = group([("events", 2)])
    grown = expand(previous, [("events", 4)])
    assert grown.tasks == (Task("Partition 0", ("events:0", "events:2")),
                           Task("Partition 1", ("events:1", "events:3")))
    assert expansion_parents(previous, grown) == {"events:2": "events:0", "events:3": "events:1"}


def test_expansion_keeps_cogroup_and_other_inputs_in_place() -> None:
    previous = group([("a", 8), ("b", 12)], "cogroup")
    grown = expand(previous, [("a", 16), ("b", 12)])
    assert names(grown) == names(previous)
    assert members(grown)["Group 1"] == ("a:1", "a:5", "a:9", "a:13", "b:1", "b:5", "b:9")


def test_unchanged_inputs_give_the_same_grouping() -> None:
    previous = group([("a", 3), ("b", 5)])
    assert expand(previous, previous.inputs) == previous
    assert expansion_parents(previous, previous) == {}


@pytest.mark.parametrize(("new", "words"), [
    (6, ["'events'", "from 4 to 6 partitions", "multiple of 4", "grow it to 8"]),
    (2, ["'events'", "from 4 to 2 partitions", "shrink", "restore 4"]),
])
def test_expansion_refusals_name_topic_and_counts(new: int, words: list[str]) -> None:
    previous = group([("other", 4), ("events", 4)])
    for call in (lambda: expand(previous, [("other", 4), ("events", new)]),
                 lambda: expansion_parents(previous, group([("other", 4), ("events", new)]))):
        with pytest.raises(GroupingError) as err:
            call()
        for word in words:
            assert word in str(err.value)


def test_new_topic_gets_its_own_suffixed_tasks_after_the_old_ones() -> None:
    previous = group([("a", 2)])
    grown = expand(previous, [("clicks", 3), ("a", 2), ("views", 1)])
    assert names(grown) == ["Partition 0", "Partition 1", "Partition 0 (clicks,views)",
                            "Partition 1 (clicks,views)", "Partition 2 (clicks,views)"]
    assert members(grown)["Partition 0 (clicks,views)"] == ("clicks:0", "views:0")
    assert expansion_parents(previous, grown) == {}


def test_new_topic_under_ssp_keeps_ssp_names() -> None:
    grown = expand(group([("a", 1)], "ssp"), [("a", 1), ("b", 2)])
    assert names(grown) == ["SSP a:0", "SSP b:0", "SSP b:1"]


def test_new_task_names_never_reuse_a_previous_name() -> None:
    previous = Grouping("single", (("a", 1), ("b", 1)),
                        (Task("Single", ("a:0",)), Task("Single (c)", ("b:0",))))
    grown = expand(previous, [("a", 1), ("c", 1)])
    # "Single (c)" belonged to b's dropped task: its store may linger, so it is not reused
    assert names(grown) == ["Single", "Single (c) #2"]


def test_removed_input_leaves_tasks_and_empty_tasks_go() -> None:
    previous = group([("a", 2), ("b", 4)])
    shrunk = expand(previous, [("b", 4)])
    assert names(shrunk) == names(previous)
    assert members(shrunk)["Partition 0"] == ("b:0",)
    assert names(expand(previous, [("a", 2)])) == ["Partition 0", "Partition 1"]


def test_custom_algorithm_and_bad_parents() -> None:
    previous = group([("r", 2)], "ssp")

    def by_range(topic: str, old: int, new: int, partition: int) -> int:
        return partition // (new // old)

    # a pluggable algorithm picks each new partition's parent; old partitions stay put
    grown = expand(previous, [("r", 4)], by_range)
    assert members(grown) == {"SSP r:0": ("r:0",), "SSP r:1": ("r:1", "r:2", "r:3")}
    assert expansion_parents(previous, grown, by_range) == {"r:2": "r:1", "r:3": "r:1"}
    with pytest.raises(GroupingError, match="parent 2 for r:2.*0 to 1"):
        expand(previous, [("r", 4)], lambda t, o, n, p: p)


def test_mod_expansion_is_p_mod_n() -> None:
    assert [mod_expansion("t", 4, 12, p) for p in range(4, 12)] == [0, 1, 2, 3, 0, 1, 2, 3]


# --- JSON ------------------------------------------------------------------------------------

def test_json_round_trip_and_pinned_shape() -> None:
    grouping = expand(group([("a", 2), ("b", 3)], "cogroup"), [("a", 4), ("b", 3), ("c", 2)])
    data = json.loads(json.dumps(grouping.to_json()))
    assert data["scheme"] == "cogroup"
    assert data["tasks"][0] == {"name": "Group 0", "partitions": ["a:0", "a:1", "a:2", "a:3",
                                                                  "b:0", "b:1", "b:2"]}
    assert Grouping.from_json(data) == grouping
    pinned = {"scheme": data["scheme"], "tasks": data["tasks"]}
    assert Grouping.from_json(pinned).inputs == (("a", 4), ("b", 3), ("c", 2))


@pytest.mark.parametrize(("data", "words"), [
    ([], ["JSON object"]),
    ({"tasks": []}, ["'scheme' must be a string"]),
    ({"scheme": "partition"}, ["'tasks' must be a list"]),
    ({"scheme": "nope", "tasks": [{"name": "x", "partitions": ["a:0"]}]}, ["'nope'"]),
    ({"scheme": "ssp", "tasks": [3]}, ["tasks[0]"]),
    ({"scheme": "ssp", "tasks": [{"name": "x", "partitions": [1]}]}, ["tasks[0].partitions[0]"]),
    ({"scheme": "ssp", "tasks": [{"name": "x", "partitions": ["a0"]}]}, ["'a0'"]),
    ({"scheme": "ssp", "tasks": [{"name": "x", "partitions": ["a:1"]}]}, ["a:0 is in no task"]),
    ({"scheme": "ssp", "tasks": []}, ["no inputs"]),
    ({"scheme": "ssp", "tasks": [{"name": "x", "partitions": ["a:0"]},
                                 {"name": "x", "partitions": ["a:1"]}]}, ["'x'", "unique"]),
    ({"scheme": "ssp", "tasks": [{"name": "x", "partitions": []}],
      "inputs": [{"topic": "a", "partition_count": 1}]}, ["'x' has no partitions"]),
    ({"scheme": "ssp", "tasks": [{"name": "x", "partitions": ["a:0", "a:1"]}],
      "inputs": [{"topic": "a", "partition_count": 1}]}, ["a:1", "not a partition of", "a=1"]),
    ({"scheme": "ssp", "tasks": [], "inputs": [{"topic": "a"}]}, ["inputs[0]",
                                                                  "'partition_count'"]),
])
def test_from_json_refuses_broken_groupings(data: object, words: list[str]) -> None:
    with pytest.raises(GroupingError) as err:
        Grouping.from_json(data)
    for word in words:
        assert word in str(err.value)


# --- properties --------------------------------------------------------------------------------

TOPICS = st.sampled_from(["a", "b", "c", "d", "events", "clicks"])
INPUTS = st.lists(st.tuples(TOPICS, st.integers(1, 24)), min_size=1, max_size=4,
                  unique_by=lambda item: item[0])


@settings(max_examples=150, deadline=None)
@given(inputs=INPUTS, scheme=st.sampled_from(SCHEMES))
def test_every_partition_lands_in_exactly_one_task(inputs: list[tuple[str, int]],
                                                   scheme: str) -> None:
    grouping = group(inputs, scheme)
    expected = Counter(f"{t}:{p}" for t, n in inputs for p in range(n))
    assert Counter(p for task in grouping.tasks for p in task.partitions) == expected
    order = {t: i for i, (t, _) in enumerate(inputs)}
    for task in grouping.tasks:
        keys = [(order[t], n) for t, n in map(parse_partition, task.partitions)]
        assert keys == sorted(keys)
    assert Grouping.from_json(grouping.to_json()) == grouping


@st.composite
def expansions(draw: st.DrawFn) -> tuple[Grouping, list[tuple[str, int]]]:
    inputs = draw(INPUTS)
    previous = group(inputs, draw(st.sampled_from(SCHEMES)))
    kept = [(t, n * draw(st.integers(1, 4))) for t, n in inputs if draw(st.booleans())]
    fresh = draw(st.lists(st.tuples(TOPICS, st.integers(1, 8)), max_size=2,
                          unique_by=lambda item: item[0]))
    new = kept + [(t, n) for t, n in fresh if t not in dict(inputs)]
    if not new:
        new = [inputs[0]]
    return previous, draw(st.permutations(new))


@settings(max_examples=200, deadline=None)
@given(case=expansions())
def test_expansion_never_moves_old_partitions_or_old_tasks(
        case: tuple[Grouping, list[tuple[str, int]]]) -> None:
    previous, inputs = case
    grown = expand(previous, inputs)
    before, after = partition_to_tasks(previous), partition_to_tasks(grown)
    for partition, tasks in after.items():
        assert len(tasks) == 1
        if partition in before:
            assert tasks == before[partition]
    old_names = names(previous)
    survivors = [n for n in names(grown) if n in old_names]
    assert names(grown)[:len(survivors)] == survivors
    assert survivors == [n for n in old_names if n in names(grown)]
    old_topics = {t for t, _ in previous.inputs}
    for task in previous.tasks:
        if task.name not in survivors:
            assert not any(parse_partition(p)[0] in dict(inputs) for p in task.partitions)
    for task in grown.tasks[len(survivors):]:
        assert not any(parse_partition(p)[0] in old_topics for p in task.partitions)
    assert Grouping.from_json(grown.to_json()) == grown


@settings(max_examples=200, deadline=None)
@given(case=expansions())
def test_parents_are_old_partitions_sharing_the_childs_tasks(
        case: tuple[Grouping, list[tuple[str, int]]]) -> None:
    previous, inputs = case
    grown = expand(previous, inputs)
    parents = expansion_parents(previous, grown)
    before, after = partition_to_tasks(previous), partition_to_tasks(grown)
    old_counts = dict(previous.inputs)
    assert set(parents) == {p for p in after if p not in before
                            and parse_partition(p)[0] in old_counts}
    for child, parent in parents.items():
        (topic, number), (parent_topic, parent_number) = map(parse_partition, (child, parent))
        assert parent_topic == topic
        assert parent_number == number % old_counts[topic]
        assert after[child] == before[parent]


# --- baton group ---------------------------------------------------------------------------------

def run(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(group_command, list(args), input=stdin)
    return result.exit_code, result.output


def test_cli_prints_a_table() -> None:
    code, out = run("--input", "a=4", "--input", "b=8")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "scheme partition, inputs a=4, b=8: 8 tasks"
    assert lines[2].split() == ["TASK", "N", "PARTITIONS"]
    assert lines[3].split() == ["Partition", "0", "2", "a:0", "b:0"]
    assert lines[-1].split() == ["Partition", "7", "1", "b:7"]


def test_cli_table_compacts_ranges() -> None:
    code, out = run("--scheme", "single", "--input", "a=4", "--input", "b=1")
    assert code == 0
    assert out.splitlines()[-1].split() == ["Single", "5", "a:0-3", "b:0"]


def test_cli_json_round_trips_through_previous(tmp_path: Path) -> None:
    code, out = run("--scheme", "ssp", "--input", "events=2", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["scheme"] == "ssp"
    assert data["tasks"] == [{"name": "SSP events:0", "partitions": ["events:0"]},
                             {"name": "SSP events:1", "partitions": ["events:1"]}]
    previous = tmp_path / "grouping.json"
    previous.write_text(out)
    code, out = run("--input", "events=4", "--previous", str(previous), "--json")
    assert code == 0
    assert json.loads(out)["tasks"] == [
        {"name": "SSP events:0", "partitions": ["events:0", "events:2"]},
        {"name": "SSP events:1", "partitions": ["events:1", "events:3"]}]
    code, text = run("--input", "events=4", "--previous", "-", stdin=json.dumps(data))
    assert code == 0
    assert "events:2 <- events:0" in text and "events:3 <- events:1" in text


def test_cli_previous_without_inputs_key_works(tmp_path: Path) -> None:
    previous = tmp_path / "pinned.json"
    previous.write_text(json.dumps({"scheme": "partition", "tasks": [
        {"name": "Partition 0", "partitions": ["e:0"]},
        {"name": "Partition 1", "partitions": ["e:1"]}]}))
    code, out = run("--input", "e=4", "--previous", str(previous), "--json")
    assert code == 0
    assert json.loads(out)["tasks"][1] == {"name": "Partition 1", "partitions": ["e:1", "e:3"]}


@pytest.mark.parametrize(("args", "words"), [
    (["--input", "events"], ["--input", "'events' is not T=N"]),
    (["--input", "=4"], ["--input", "'=4' is not T=N"]),
    (["--input", "events=x"], ["--input", "'x' is not a positive integer"]),
    (["--input", "events=0"], ["--input", "'0'"]),
    (["--input", "events=-2"], ["--input", "'-2'"]),
    (["--input", "a=1", "--input", "a=2"], ["'a' is listed twice"]),
    (["--input", "a:b=1"], ["not a Kafka topic name"]),
    (["--scheme", "hash", "--input", "a=1"], ["--scheme", "hash"]),
    ([], ["--input"]),
])
def test_cli_bad_arguments_exit_2(args: list[str], words: list[str]) -> None:
    code, out = run(*args)
    assert code == 2
    for word in words:
        assert word in out


@pytest.mark.parametrize(("content", "args", "words"), [
    (None, [], ["--previous", "cannot read", "No such file"]),
    ("{not json", [], ["--previous", "is not JSON"]),
    ('{"scheme": "ssp"}', [], ["--previous", "is not a grouping", "'tasks'"]),
    ('{"scheme": "ssp", "tasks": [{"name": "SSP e:0", "partitions": ["e:0"]}]}',
     ["--scheme", "cogroup"], ["--scheme cogroup differs", "scheme ssp"]),
    ('{"scheme": "ssp", "tasks": [{"name": "SSP e:0", "partitions": ["e:0"]},'
     '{"name": "SSP e:1", "partitions": ["e:1"]}]}', [], ["from 2 to 3 partitions"]),
])
def test_cli_bad_previous_exits_2_naming_the_file(tmp_path: Path, content: str | None,
                                                  args: list[str], words: list[str]) -> None:
    path = tmp_path / "previous.json"
    if content is not None:
        path.write_text(content)
    code, out = run("--input", "e=3", "--previous", str(path), *args)
    assert code == 2
    assert str(path) in " ".join(out.split())
    for word in words:
        assert word in out


def test_baton_main_has_the_group_command() -> None:
    from orchestrator.cli import main

    result = CliRunner().invoke(main, ["group", "--input", "a=1", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output)["tasks"] == [{"name": "Partition 0", "partitions": ["a:0"]}]
