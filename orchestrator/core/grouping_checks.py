"""The form of a grouping: its inputs and tasks checked, and read from JSON (pure).

A grouping's rules are in orchestrator/core/grouping.py; this module holds what it is
made of (`Task`, `Inputs`) and the checks every `Grouping` passes when it is built,
with errors that say where a hand-edited file went wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from orchestrator.wire.partitions import TOPIC_NAME, PartitionNameError, format_partition
from orchestrator.wire.partitions import parse_partition as parse_wire_partition

__all__ = [
    "GroupingError", "Inputs", "Task", "check_inputs", "check_tasks", "derive_inputs",
    "inputs_from_json", "json_field", "parse_partition", "task_from_json",
]

Inputs: TypeAlias = tuple[tuple[str, int], ...]


class GroupingError(ValueError):
    """Inputs, a grouping or an expansion that Baton refuses; the message says why."""


@dataclass(frozen=True)
class Task:
    """A unit of state and of assignment: a named set of input partitions."""

    name: str
    partitions: tuple[str, ...]


def parse_partition(text: str) -> tuple[str, int]:
    """`orchestrator.wire.partitions.parse_partition`, raising `GroupingError`."""
    try:
        return parse_wire_partition(text)
    except PartitionNameError as exc:
        raise GroupingError(str(exc)) from None


# --- validation --------------------------------------------------------------------------

def check_inputs(inputs: Sequence[tuple[str, int]]) -> Inputs:
    """Inputs as a tuple, refused unless topics are Kafka names, distinct, counts > 0."""
    if not inputs:
        raise GroupingError("no inputs: a grouping needs at least one (topic, partition count)")
    seen: set[str] = set()
    for topic, count in inputs:
        if not isinstance(topic, str) or not TOPIC_NAME.fullmatch(topic):
            raise GroupingError(f"input topic {topic!r} is not a Kafka topic name "
                                f"(1 to 249 of A-Z a-z 0-9 . _ -)")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise GroupingError(f"input {topic!r} has {count!r} partitions: a partition count "
                                f"must be a positive integer")
        if topic in seen:
            raise GroupingError(f"input {topic!r} is listed twice: each topic is one input")
        seen.add(topic)
    return tuple((topic, count) for topic, count in inputs)


def check_tasks(inputs: Inputs, tasks: tuple[Task, ...]) -> None:
    """Tasks are named uniquely, non-empty, and cover every input partition once."""
    counts = dict(inputs)
    names: set[str] = set()
    covered: set[str] = set()
    for task in tasks:
        if not task.name or task.name in names:
            raise GroupingError(f"task name {task.name!r} is empty or not unique")
        names.add(task.name)
        if not task.partitions or len(set(task.partitions)) != len(task.partitions):
            raise GroupingError(f"task {task.name!r} has no partitions, or one twice")
        for partition in task.partitions:
            topic, number = parse_partition(partition)
            if number >= counts.get(topic, 0):
                raise GroupingError(f"task {task.name!r} holds {partition}, which is not a "
                                    f"partition of the inputs ({_describe(inputs)})")
        covered.update(task.partitions)
    for topic, count in inputs:
        missing = [p for p in range(count) if format_partition(topic, p) not in covered]
        if missing:
            raise GroupingError(f"{format_partition(topic, missing[0])} is in no task: every "
                                f"partition of the inputs ({_describe(inputs)}) needs one")


def _describe(inputs: Inputs) -> str:
    return ", ".join(f"{t}={n}" for t, n in inputs)


# --- JSON --------------------------------------------------------------------------------

def json_field(data: Mapping[Any, Any], key: str, kind: type[Any], where: str) -> Any:
    """`data[key]`, refused (saying `where`) unless it is a `kind`."""
    if not isinstance(data.get(key), kind):
        raise GroupingError(f"{where}: {key!r} must be a {_JSON_KIND[kind]}, "
                            f"got {data.get(key)!r}")
    return data[key]


_JSON_KIND: dict[type[Any], str] = {str: "string", list: "list", int: "integer"}


def task_from_json(raw: object, where: str) -> Task:
    """One task of ``Grouping.to_json()`` output."""
    if not isinstance(raw, Mapping):
        raise GroupingError(f"{where}: a task must be an object with 'name' and 'partitions'")
    name = json_field(raw, "name", str, where)
    partitions = json_field(raw, "partitions", list, where)
    for i, partition in enumerate(partitions):
        if not isinstance(partition, str):
            raise GroupingError(f"{where}.partitions[{i}]: {partition!r} is not 'topic:N'")
        parse_partition(partition)
    return Task(name, tuple(partitions))


def inputs_from_json(raw: object) -> Inputs:
    """The "inputs" of ``Grouping.to_json()`` output."""
    if not isinstance(raw, list):
        raise GroupingError(f"grouping: 'inputs' must be a list, got {raw!r}")
    inputs = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise GroupingError(f"inputs[{i}]: expected {{'topic': ..., 'partition_count': ...}}")
        topic = json_field(item, "topic", str, f"inputs[{i}]")
        inputs.append((topic, json_field(item, "partition_count", int, f"inputs[{i}]")))
    return check_inputs(inputs)


def derive_inputs(tasks: tuple[Task, ...]) -> Inputs:
    """Topics in order of first appearance (input order for every scheme), count = max + 1."""
    counts: dict[str, int] = {}
    for task in tasks:
        for partition in task.partitions:
            topic, number = parse_partition(partition)
            counts[topic] = max(counts.get(topic, 0), number + 1)
    return check_inputs(list(counts.items()))
