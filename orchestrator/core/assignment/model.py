"""The assignor's data: tasks, processors with their previous roles and lags,
the config, and the answer (roles per processor, follow-up)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from orchestrator.wire.catchup import is_caught_up

__all__ = [
    "Assignment", "AssignmentConfig", "AssignmentError", "Move", "ProcessorAssignment",
    "INF", "Key", "ProcessorSnapshot", "TaskInfo", "View",
]


INF = math.inf
# A sort key: floats and ints only, compared left to right.
Key = tuple[float, ...]


class AssignmentError(ValueError):
    """Input the assignor cannot make sense of (duplicate ids, two owners of one task)."""



@dataclass(frozen=True)
class TaskInfo:
    """A task to assign; stateless tasks need no catch-up and move freely."""

    name: str
    stateful: bool = True



@dataclass(frozen=True)
class ProcessorSnapshot:
    """A live processor: its capacity, what it ran last time, its lag per task, and the
    tasks it may not be given (it failed them recently)."""

    id: str
    capacity: int = 1
    active: frozenset[str] = frozenset()
    standby: frozenset[str] = frozenset()
    warmup: frozenset[str] = frozenset()
    lags: Mapping[str, int] = field(default_factory=dict, hash=False)
    excluded: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # Accept any iterable or mapping, keep an immutable copy: callers cannot alias it.
        for role in ("active", "standby", "warmup", "excluded"):
            object.__setattr__(self, role, frozenset(getattr(self, role)))
        object.__setattr__(self, "lags", MappingProxyType(dict(self.lags)))
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int) \
                or self.capacity < 1:
            raise AssignmentError(f"processor {self.id!r}: capacity must be an integer >= 1, "
                                  f"got {self.capacity!r}")



@dataclass(frozen=True)
class AssignmentConfig:
    """The ``[catch_up]`` knobs the assignor uses (docs/configuration.md, "[catch_up]")."""

    acceptable_lag: int = 1000
    max_warmups: int = 2
    num_standbys: int = 0
    balance_factor: int = 1

    def __post_init__(self) -> None:
        # max_warmups and balance_factor of 0 could never reach balance (KIP-441 too).
        for name, low in (("acceptable_lag", 0), ("max_warmups", 1), ("num_standbys", 0),
                          ("balance_factor", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise AssignmentError(f"{name} must be an integer >= {low}, got {value!r}")



@dataclass(frozen=True)
class ProcessorAssignment:
    """One processor's roles, each tuple sorted by task name."""

    id: str
    active: tuple[str, ...] = ()
    warmup: tuple[str, ...] = ()
    standby: tuple[str, ...] = ()



@dataclass(frozen=True)
class Assignment:
    """Roles for every processor (sorted by id); ``follow_up``: warmups are in progress."""

    processors: tuple[ProcessorAssignment, ...]
    follow_up: bool

    def owners(self) -> dict[str, str]:
        """Task name -> the id of the processor running it actively."""
        return {t: p.id for p in self.processors for t in p.active}



@dataclass(frozen=True)
class Move:
    """An active task changing hands; ``source`` is None for a new or orphaned task."""

    task: str
    source: str | None
    target: str



class View:
    """The input sorted and indexed: integer processor indices keep heaps and sorts cheap,
    and sorting by name and id here is what makes the output independent of input order."""

    def __init__(self, tasks: Iterable[TaskInfo], processors: Iterable[ProcessorSnapshot],
                 config: AssignmentConfig) -> None:
        self.config = config
        self.tasks = sorted(tasks, key=lambda t: t.name)
        self.procs = sorted(processors, key=lambda p: p.id)
        _check_unique([t.name for t in self.tasks], "task")
        _check_unique([p.id for p in self.procs], "processor id")
        self.caps = [p.capacity for p in self.procs]
        self.stateful = {t.name: t.stateful for t in self.tasks}
        self.holder: dict[str, int] = {}
        self.lags: dict[str, list[tuple[int, int]]] = defaultdict(list)
        # task -> processors that may not be given it; their lags on it are ignored
        self.excluded: dict[str, set[int]] = defaultdict(set)
        for i, proc in enumerate(self.procs):
            for name in sorted(proc.active & self.stateful.keys()):
                if name in self.holder:
                    other = self.procs[self.holder[name]].id
                    raise AssignmentError(f"task {name!r} is active on both {other!r} and "
                                          f"{proc.id!r}; a task has one active owner")
                self.holder[name] = i
            for name in proc.excluded:
                self.excluded[name].add(i)
            for name, lag in proc.lags.items():
                if self.stateful.get(name) and name not in proc.excluded:
                    self.lags[name].append((i, lag))

    def caught_up(self, i: int, name: str, lag: float) -> bool:
        """Whether processor ``i`` with ``lag`` on ``name`` may take over its active."""
        return self.holder.get(name) == i or is_caught_up(lag, self.config.acceptable_lag)

    def lag(self, i: int, name: str) -> float:
        """Processor ``i``'s reported lag on ``name``; infinite when not reported."""
        if name in self.procs[i].excluded:
            return INF
        return self.procs[i].lags.get(name, INF)



def _check_unique(names: Sequence[str], what: str) -> None:
    """Reject duplicates: two tasks or processors with one name make roles ambiguous."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise AssignmentError(f"duplicate {what} {name!r}")
        seen.add(name)
