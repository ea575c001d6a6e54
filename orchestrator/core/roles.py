"""Role listings: what the coordinator tells each processor to run, and the one rule
that matters most: a task is listed active on at most one valid processor.

The listing of a processor is exactly the `assignment` of its heartbeat replies
(level-triggered): a task leaving `active` is the release command, a task entering
it is the activation. Persisted whole under the key "assignment".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.wire.protocol import RoleListing

__all__ = ["RoleBook", "Roles"]

log = logging.getLogger("baton.coordinator")


@dataclass
class Roles:
    """One processor's listing."""

    active: set[str] = field(default_factory=set)
    warmup: set[str] = field(default_factory=set)
    standby: set[str] = field(default_factory=set)

    def wire(self) -> RoleListing:
        return RoleListing(active=sorted(self.active), warmup=sorted(self.warmup),
                          standby=sorted(self.standby))

    def empty(self) -> bool:
        return not (self.active or self.warmup or self.standby)

    def discard(self, task: str) -> None:
        self.active.discard(task)
        self.warmup.discard(task)
        self.standby.discard(task)

    def count(self) -> int:
        return len(self.active) + len(self.warmup) + len(self.standby)


class RoleBook:
    """Listings by processor id; `valid` says whether a processor may run tasks."""

    def __init__(self, valid: Callable[[str], bool]) -> None:
        self._valid = valid
        self._by_id: dict[str, Roles] = {}
        # task -> the processor it was last listed active on: every listing goes
        # through `list_active` or `load`, so this finds the owner without a scan
        # (a removal is seen at lookup: the task is no longer in that listing)
        self._listed_on: dict[str, str] = {}

    def __iter__(self) -> Iterator[tuple[str, Roles]]:
        return iter(sorted(self._by_id.items()))

    def get(self, pid: str) -> Roles:
        """The listing of `pid` (created empty on first use)."""
        return self._by_id.setdefault(pid, Roles())

    def peek(self, pid: str) -> Roles:
        """The listing of `pid` without creating one."""
        return self._by_id.get(pid) or Roles()

    def drop(self, pid: str) -> None:
        self._by_id.pop(pid, None)

    def keep_only(self, pids: set[str]) -> None:
        for pid in [p for p in self._by_id if p not in pids]:
            del self._by_id[pid]

    def owner(self, task: str) -> str | None:
        """The valid processor listed with `task` active, if any."""
        pid = self._listed_on.get(task)
        roles = self._by_id.get(pid) if pid is not None else None
        if roles is None or task not in roles.active or not self._valid(pid):  # type: ignore[arg-type]
            return None
        return pid

    def warm_up(self, task: str, pid: str) -> None:
        if self._valid(pid):
            roles = self.get(pid)
            roles.standby.discard(task)
            roles.warmup.add(task)

    def list_active(self, task: str, pid: str) -> None:
        """List `task` active on `pid`, and on nobody else."""
        if not self._valid(pid):
            return
        other = self._listed_on.get(task)
        previous = self._by_id.get(other) if other is not None and other != pid else None
        if previous is not None and task in previous.active:
            if self._valid(other):  # type: ignore[arg-type]
                log.error("task %r was still listed active on %s while activating on %s: "
                          "unlisted (its producer is fenced by the activation)",
                          task, other, pid)
            previous.active.discard(task)
        roles = self.get(pid)
        roles.discard(task)
        roles.active.add(task)
        self._listed_on[task] = pid

    def to_record(self) -> dict[str, Any]:
        return {pid: {"active": sorted(r.active), "warmup": sorted(r.warmup),
                      "standby": sorted(r.standby)}
                for pid, r in sorted(self._by_id.items()) if not r.empty()}

    def load(self, record: Mapping[str, Any]) -> None:
        for pid, roles in record.items():
            self._by_id[pid] = Roles(set(roles.get("active", ())), set(roles.get("warmup", ())),
                                     set(roles.get("standby", ())))
            self._listed_on.update({task: pid for task in roles.get("active", ())})
