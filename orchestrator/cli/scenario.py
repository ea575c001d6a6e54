"""The `baton assign --scenario` document: parse it into the assignor's input and
format the answer (the pinned JSON shapes of docs/design.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.core.assignment.model import (
    Assignment,
    AssignmentConfig,
    ProcessorSnapshot,
    TaskInfo,
)

__all__ = [
    "Scenario", "ScenarioError", "format_assignment", "format_scenario",
    "parse_scenario", "scenario_from_json",
]


class ScenarioError(ValueError):
    """A scenario document that is not valid; ``path`` names the offending key."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path



@dataclass(frozen=True)
class Scenario:
    """A what-if input for ``baton assign``: exactly the arguments of ``assign``."""

    tasks: tuple[TaskInfo, ...]
    processors: tuple[ProcessorSnapshot, ...]
    config: AssignmentConfig



_TASK_KEYS = frozenset({"name", "stateful"})


_TASK_KEYS = frozenset({"name", "stateful"})
_PROCESSOR_KEYS = frozenset({"id", "capacity", "active", "standby", "warmup", "lags"})


_PROCESSOR_KEYS = frozenset({"id", "capacity", "active", "standby", "warmup", "lags"})
_CONFIG_KEYS = frozenset({"acceptable_lag", "max_warmups", "num_standbys", "balance_factor"})


_CONFIG_KEYS = frozenset({"acceptable_lag", "max_warmups", "num_standbys", "balance_factor"})
_ROLES = ("active", "standby", "warmup")



def scenario_from_json(text: str) -> Scenario:
    """Parse a scenario document from JSON text.

    Raises:
        ScenarioError: invalid JSON (path ``line L column C``) or an invalid document.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"line {exc.lineno} column {exc.colno}",
                            f"invalid JSON: {exc.msg}") from exc
    return parse_scenario(data)



def parse_scenario(data: object) -> Scenario:
    """Validate a decoded scenario document; missing optional fields get their defaults.

    Raises:
        ScenarioError: the first problem found; ``path`` names the key, such as
            ``processors[2].lags.t1`` or ``config.max_warmups``.
    """
    root = _object(data, "scenario", None)
    tasks = tuple(_parse_task(raw, f"tasks[{k}]")
                  for k, raw in enumerate(_list(_required(root, "tasks", ""), "tasks")))
    known: dict[str, bool] = {}
    for k, task in enumerate(tasks):
        if task.name in known:
            raise ScenarioError(f"tasks[{k}].name", f"duplicate task {task.name!r}")
        known[task.name] = task.stateful
    raw_procs = _list(_required(root, "processors", ""), "processors")
    processors = tuple(_parse_processor(raw, f"processors[{k}]", known)
                       for k, raw in enumerate(raw_procs))
    _check_processors(processors)
    config = _parse_config(root.get("config", {}))
    return Scenario(tasks, processors, config)



def _parse_task(raw: object, path: str) -> TaskInfo:
    """One ``{"name", "stateful"}`` entry."""
    obj = _object(raw, path, _TASK_KEYS)
    stateful = obj.get("stateful", True)
    if not isinstance(stateful, bool):
        raise ScenarioError(f"{path}.stateful", f"expected true or false, got {stateful!r}")
    return TaskInfo(_name(_required(obj, "name", path), f"{path}.name"), stateful)



def _parse_processor(raw: object, path: str, known: Mapping[str, bool]) -> ProcessorSnapshot:
    """One processor entry: its roles must name known tasks, one role per task."""
    obj = _object(raw, path, _PROCESSOR_KEYS)
    pid = _name(_required(obj, "id", path), f"{path}.id")
    roles: dict[str, frozenset[str]] = {}
    for role in _ROLES:
        names: list[str] = []
        for k, raw_name in enumerate(_list(obj.get(role, []), f"{path}.{role}")):
            where = f"{path}.{role}[{k}]"
            name = _known(_name(raw_name, where), where, known)
            if name in names:
                raise ScenarioError(where, f"task {name!r} is listed twice")
            for other, held in roles.items():
                if name in held:
                    raise ScenarioError(where, f"task {name!r} is also {other} on {pid!r}; "
                                               f"a processor holds one role per task")
            names.append(name)
        roles[role] = frozenset(names)
    lags: dict[str, int] = {}
    for name, lag in _object(obj.get("lags", {}), f"{path}.lags", None).items():
        _known(name, f"{path}.lags", known)
        if lag is not None:  # null: not reported, the same as leaving it out
            lags[name] = _int(lag, f"{path}.lags.{name}", 0)
    capacity = _int(obj.get("capacity", 1), f"{path}.capacity", 1)
    return ProcessorSnapshot(pid, capacity, roles["active"], roles["standby"], roles["warmup"],
                          lags)



def _check_processors(processors: Sequence[ProcessorSnapshot]) -> None:
    """Processor ids are unique and every task has at most one active owner."""
    ids: dict[str, int] = {}
    owners: dict[str, str] = {}
    for k, proc in enumerate(processors):
        if proc.id in ids:
            raise ScenarioError(f"processors[{k}].id", f"duplicate processor id {proc.id!r} "
                                                       f"(also processors[{ids[proc.id]}])")
        ids[proc.id] = k
        for name in sorted(proc.active):
            if name in owners:
                raise ScenarioError(f"processors[{k}].active",
                                    f"task {name!r} is already active on {owners[name]!r}; "
                                    f"a task has one active owner")
            owners[name] = proc.id



def _parse_config(raw: object) -> AssignmentConfig:
    """The ``config`` object; every key is optional."""
    obj = _object(raw, "config", _CONFIG_KEYS)
    defaults = AssignmentConfig()
    low = {"acceptable_lag": 0, "max_warmups": 1, "num_standbys": 0, "balance_factor": 1}
    values = {key: _int(obj.get(key, getattr(defaults, key)), f"config.{key}", low[key])
              for key in sorted(_CONFIG_KEYS)}
    return AssignmentConfig(**values)



def _required(obj: Mapping[str, object], key: str, path: str) -> object:
    """``obj[key]``, or an error naming the missing key."""
    if key not in obj:
        where = f"{path}.{key}" if path else key
        raise ScenarioError(where, "missing required key")
    return obj[key]


def _object(value: object, path: str, keys: frozenset[str] | None) -> dict[str, object]:
    """A JSON object; with ``keys``, unknown keys are refused (a typo must not pass)."""
    if not isinstance(value, dict):
        raise ScenarioError(path, f"expected a JSON object, got {_kind(value)}")
    for key in value:
        if keys is not None and key not in keys:
            raise ScenarioError(f"{path}.{key}", f"unknown key; expected one of "
                                                 f"{', '.join(sorted(keys))}")
    return value



def _list(value: object, path: str) -> list[object]:
    """A JSON array."""
    if not isinstance(value, list):
        raise ScenarioError(path, f"expected a JSON array, got {_kind(value)}")
    return value



def _name(value: object, path: str) -> str:
    """A non-empty string (a task name or a processor id)."""
    if not isinstance(value, str) or not value:
        raise ScenarioError(path, f"expected a non-empty string, got {_kind(value)}")
    return value



def _known(name: str, path: str, known: Mapping[str, bool]) -> str:
    """Refuse a task name that is not in ``tasks``: most likely a typo."""
    if name not in known:
        raise ScenarioError(path, f"unknown task {name!r}: not in 'tasks'")
    return name



def _int(value: object, path: str, low: int) -> int:
    """An integer at least ``low`` (JSON true/false and 1.5 are refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ScenarioError(path, f"expected an integer >= {low}, got {_kind(value)}")
    return value



def _kind(value: object) -> str:
    """A value as the error shows it: the JSON literal when short, else its JSON type."""
    text = json.dumps(value) if isinstance(value, str | int | float | bool | None) else ""
    if text and len(text) <= 40:
        return text
    if isinstance(value, dict):
        return "an object"
    return "an array" if isinstance(value, list) else "a long string"



def format_assignment(result: Assignment) -> dict[str, Any]:
    """The pinned ``baton assign --json`` document."""
    return {"processors": [{"id": p.id, "active": list(p.active), "warmup": list(p.warmup),
                            "standby": list(p.standby)} for p in result.processors],
            "follow_up": result.follow_up}



def format_scenario(scenario: Scenario) -> dict[str, Any]:
    """A scenario as the document ``parse_scenario`` reads (lists and keys sorted)."""
    config = scenario.config
    return {
        "tasks": [{"name": t.name, "stateful": t.stateful} for t in scenario.tasks],
        "processors": [{"id": p.id, "capacity": p.capacity, "active": sorted(p.active),
                        "standby": sorted(p.standby), "warmup": sorted(p.warmup),
                        "lags": dict(sorted(p.lags.items()))} for p in scenario.processors],
        "config": {"acceptable_lag": config.acceptable_lag, "max_warmups": config.max_warmups,
                   "num_standbys": config.num_standbys,
                   "balance_factor": config.balance_factor},
    }
