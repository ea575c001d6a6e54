"""Grouping: which input partitions make up each task, and how tasks survive partition growth.

Rules and theory of operation: docs/design.md, "Growing past the number of tasks".
Everything here is pure: no I/O.

Inputs are an ordered list of ``(topic, partition count)``; a partition is written
``"topic:N"``. Topic names follow Kafka's rule (``[A-Za-z0-9._-]``, at most 249
characters), counts are positive, topics are distinct, and there is at least one input.

Schemes (``group``):

- ``partition`` (default): task ``"Partition N"`` holds partition N of every input that
  has one; ``max(counts)`` tasks, ordered by N.
- ``ssp``: one task ``"SSP topic:N"`` per input partition, in input order then partition.
- ``cogroup``: partition p of every input goes to task ``"Group (p mod g)"`` with
  ``g = gcd(counts)``; g tasks.
- ``single``: one task ``"Single"`` holding everything.

Within a task, partitions are listed in input order, then by partition number. A task is
never empty, task names are unique, and every input partition is in some task (a
``Grouping`` checks this when it is built, so a hand-edited ``--previous`` file cannot
smuggle in a broken one).

Fixed-task expansion (``expand``). A task owns a RocksDB store and a transactional id, so
its name and its keys must not change when an input grows:

- An input growing from n to k*n partitions: each new partition p joins every task that
  held its parent ``algorithm(topic, n, k*n, p)``, by default ``p mod n``. Under a hash
  partitioner a key goes to ``h mod k*n``, and ``(h mod k*n) mod n == h mod n``, so each
  key stays in the task that already holds its state. The algorithm is pluggable (say,
  ``p // k`` for range partitioning) but must name a parent in ``[0, n)``.
- Growth by a non-multiple, or a shrink, is refused with a ``GroupingError`` naming the
  topic and both counts: either would move keys between tasks.
- A new input topic is grouped on its own with the previous grouping's scheme (all new
  topics together), and its tasks are appended after the existing ones. They are named
  ``"<scheme name> (<new topics, comma-separated>)"``, e.g. ``"Partition 0 (clicks)"``,
  except under ``ssp``, whose ``"SSP clicks:0"`` already names the partition. Kafka topic
  names hold no space, parenthesis or comma, so such a name cannot equal a name built
  for other topics. A name the previous grouping already used (only possible with a
  hand-edited file, or an earlier task of a topic that was removed and is now back) gets
  the first free suffix ``" #2"``, ``" #3"``, ...: a dropped task's store and
  transactional id may still exist, so its name is never reused for other keys.
- A removed input's partitions leave their tasks. A task left with no partition is
  removed: it has nothing to consume, and its store only holds state of the removed
  input. Every other task keeps its name, its partitions and its place in the order.
- ``expansion_parents`` maps each new partition to its parent, for the expansion barrier:
  a processor starts ``t:p`` only after ``t:(p mod n)`` reached the offset recorded at
  expansion, so a key's records are never processed out of order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from orchestrator.core.grouping_checks import (
    GroupingError,
    Inputs,
    Task,
    check_inputs,
    check_tasks,
    derive_inputs,
    inputs_from_json,
    json_field,
    parse_partition,
    task_from_json,
)
from orchestrator.wire.partitions import format_partition

__all__ = [
    "SCHEMES",
    "ExpansionAlgorithm",
    "Grouping",
    "GroupingError",
    "Inputs",
    "Scheme",
    "Task",
    "expand",
    "expansion_parents",
    "format_partition",
    "group",
    "mod_expansion",
    "parse_partition",
    "partition_to_tasks",
]

Scheme = Literal["partition", "ssp", "cogroup", "single"]
SCHEMES: tuple[Scheme, ...] = ("partition", "ssp", "cogroup", "single")



@dataclass(frozen=True)
class Grouping:
    """A complete mapping of input partitions to tasks; validated when built."""

    scheme: str
    inputs: Inputs
    tasks: tuple[Task, ...]

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise GroupingError(f"unknown grouping scheme {self.scheme!r}: expected one of "
                                f"{', '.join(SCHEMES)}")
        check_inputs(self.inputs)
        check_tasks(self.inputs, self.tasks)

    def to_json(self) -> dict[str, Any]:
        """The pinned ``baton group --json`` form, plus the input counts under "inputs"."""
        return {
            "scheme": self.scheme,
            "tasks": [{"name": t.name, "partitions": list(t.partitions)} for t in self.tasks],
            "inputs": [{"topic": t, "partition_count": n} for t, n in self.inputs],
        }

    @classmethod
    def from_json(cls, data: object) -> Grouping:
        """Parse ``to_json()`` output; without "inputs", counts come from the partitions.

        Raises:
            GroupingError: the data is not a valid grouping; the message says where.
        """
        if not isinstance(data, Mapping):
            raise GroupingError("a grouping must be a JSON object with 'scheme' and 'tasks'")
        scheme = json_field(data, "scheme", str, "grouping")
        raw_tasks = json_field(data, "tasks", list, "grouping")
        tasks = tuple(task_from_json(raw, f"tasks[{i}]") for i, raw in enumerate(raw_tasks))
        if "inputs" in data:
            inputs = inputs_from_json(data["inputs"])
        else:
            inputs = derive_inputs(tasks)
        return cls(scheme, inputs, tasks)


class ExpansionAlgorithm(Protocol):
    """Picks the parent (an old partition number) of new partition ``partition``."""

    def __call__(self, topic: str, old_count: int, new_count: int, partition: int, /) -> int:
        ...


def mod_expansion(topic: str, old_count: int, new_count: int, partition: int) -> int:
    """The default: ``p mod n``, right for Kafka's hash partitioner (hash mod count)."""
    return partition % old_count


def group(inputs: Sequence[tuple[str, int]], scheme: str = "partition") -> Grouping:
    """Group ``inputs`` from scratch with ``scheme`` (see the module docstring).

    Raises:
        GroupingError: unknown scheme, no inputs, a bad topic or count, a duplicate topic.
    """
    checked = check_inputs(inputs)
    if scheme not in _BUILDERS:
        raise GroupingError(f"unknown grouping scheme {scheme!r}: expected one of "
                            f"{', '.join(SCHEMES)}")
    return Grouping(scheme, checked, _BUILDERS[scheme](checked))


def expand(previous: Grouping, inputs: Sequence[tuple[str, int]],
           algorithm: ExpansionAlgorithm = mod_expansion) -> Grouping:
    """Fit ``previous``'s tasks to the new ``inputs`` without moving any key's state.

    Args:
        previous: the grouping in force (persisted in the coordinator stream).
        inputs: the inputs now, in order; counts may have grown by a multiple.
        algorithm: picks each new partition's parent; ``p mod n`` by default.

    Returns:
        A grouping with the previous scheme: old partitions stay in their tasks, new
        partitions join their parent's tasks, new topics get new tasks at the end.

    Raises:
        GroupingError: bad inputs, a shrink or non-multiple growth, or a bad parent.
    """
    checked = check_inputs(inputs)
    parents = _parents(previous, checked, algorithm)
    holders = partition_to_tasks(previous)
    kept = {topic for topic, _ in checked}
    members = {t.name: [p for p in t.partitions if parse_partition(p)[0] in kept]
               for t in previous.tasks}
    for child, parent in parents.items():
        for name in holders[parent]:
            members[name].append(child)
    order = {topic: i for i, (topic, _) in enumerate(checked)}

    def position(partition: str) -> tuple[int, int]:
        topic, number = parse_partition(partition)
        return order[topic], number

    tasks = [Task(t.name, tuple(sorted(members[t.name], key=position)))
             for t in previous.tasks if members[t.name]]
    tasks += _new_topic_tasks(previous, checked)
    return Grouping(previous.scheme, checked, tuple(tasks))


def expansion_parents(previous: Grouping, new: Grouping,
                      algorithm: ExpansionAlgorithm = mod_expansion) -> dict[str, str]:
    """Map each partition added since ``previous`` to its parent, for the expansion barrier.

    Topics that are new in ``new`` have no parents (they start from their beginning).

    Raises:
        GroupingError: a shrink, a non-multiple growth or a bad parent (as ``expand``).
    """
    return _parents(previous, new.inputs, algorithm)


def partition_to_tasks(grouping: Grouping) -> dict[str, list[str]]:
    """Each input partition (input order, then number) to the names of the tasks holding it."""
    result: dict[str, list[str]] = {format_partition(t, p): []
                                    for t, n in grouping.inputs for p in range(n)}
    for task in grouping.tasks:
        for partition in task.partitions:
            result[partition].append(task.name)
    return result


# --- the schemes -------------------------------------------------------------------------

def _by_partition(inputs: Inputs) -> tuple[Task, ...]:
    width = max(n for _, n in inputs)
    return tuple(Task(f"Partition {p}", tuple(format_partition(t, p) for t, n in inputs if p < n))
                 for p in range(width))


def _by_ssp(inputs: Inputs) -> tuple[Task, ...]:
    return tuple(Task(f"SSP {format_partition(t, p)}", (format_partition(t, p),))
                 for t, n in inputs for p in range(n))


def _by_cogroup(inputs: Inputs) -> tuple[Task, ...]:
    width = math.gcd(*(n for _, n in inputs))
    return tuple(Task(f"Group {k}", tuple(format_partition(t, p)
                                          for t, n in inputs for p in range(k, n, width)))
                 for k in range(width))


def _single(inputs: Inputs) -> tuple[Task, ...]:
    return (Task("Single", tuple(format_partition(t, p) for t, n in inputs for p in range(n))),)


_BUILDERS: dict[str, Callable[[Inputs], tuple[Task, ...]]] = {
    "partition": _by_partition, "ssp": _by_ssp, "cogroup": _by_cogroup, "single": _single,
}


# --- expansion ---------------------------------------------------------------------------

def _parents(previous: Grouping, inputs: Inputs,
             algorithm: ExpansionAlgorithm) -> dict[str, str]:
    old_counts = dict(previous.inputs)
    parents: dict[str, str] = {}
    for topic, new in inputs:
        old = old_counts.get(topic, new)
        _check_growth(topic, old, new)
        for p in range(old, new):
            parent = algorithm(topic, old, new, p)
            if isinstance(parent, bool) or not isinstance(parent, int) or not 0 <= parent < old:
                raise GroupingError(
                    f"expansion algorithm gave parent {parent!r} for {format_partition(topic, p)} "
                    f"({topic!r} went from {old} to {new} partitions): a parent must be an "
                    f"old partition number, 0 to {old - 1}")
            parents[format_partition(topic, p)] = format_partition(topic, parent)
    return parents


def _check_growth(topic: str, old: int, new: int) -> None:
    if new < old:
        raise GroupingError(
            f"input {topic!r} went from {old} to {new} partitions: a shrink cannot keep keys "
            f"in their tasks (Kafka cannot shrink a topic either); restore {old} partitions, "
            f"or regroup without the previous grouping (all state moves)")
    if new % old:
        raise GroupingError(
            f"input {topic!r} went from {old} to {new} partitions: expansion needs a multiple "
            f"of {old} ({2 * old}, {3 * old}, ...) so that every key keeps its task; grow it "
            f"to {-(-new // old) * old}, or regroup without the previous grouping "
            f"(all state moves)")


def _new_topic_tasks(previous: Grouping, inputs: Inputs) -> list[Task]:
    old_topics = {topic for topic, _ in previous.inputs}
    fresh = tuple((t, n) for t, n in inputs if t not in old_topics)
    if not fresh:
        return []
    suffix = "" if previous.scheme == "ssp" else f" ({','.join(t for t, _ in fresh)})"
    taken = {t.name for t in previous.tasks}
    tasks = []
    for task in _BUILDERS[previous.scheme](fresh):
        name = _free_name(task.name + suffix, taken)
        taken.add(name)
        tasks.append(Task(name, task.partitions))
    return tasks


def _free_name(name: str, taken: set[str]) -> str:
    suffix = 2
    candidate = name
    while candidate in taken:
        candidate = f"{name} #{suffix}"
        suffix += 1
    return candidate
