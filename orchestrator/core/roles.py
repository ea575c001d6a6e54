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
        for pid, roles in self._by_id.items():
            if task in roles.active and self._valid(pid):
                return pid
        return None

    def warm_up(self, task: str, pid: str) -> None:
        if self._valid(pid):
            roles = self.get(pid)
            roles.standby.discard(task)
            roles.warmup.add(task)

    def list_active(self, task: str, pid: str) -> None:
        """List `task` active on `pid`, and on nobody else."""
        if not self._valid(pid):
            return
        for other, roles in self._by_id.items():
            if other != pid and task in roles.active and self._valid(other):
                log.error("task %r was still listed active on %s while activating on %s: "
                          "unlisted (its producer is fenced by the activation)",
                          task, other, pid)
            if other != pid:
                roles.active.discard(task)
        roles = self.get(pid)
        roles.discard(task)
        roles.active.add(task)

    def to_record(self) -> dict[str, Any]:
        return {pid: {"active": sorted(r.active), "warmup": sorted(r.warmup),
                      "standby": sorted(r.standby)}
                for pid, r in sorted(self._by_id.items()) if not r.empty()}

    def load(self, record: Mapping[str, Any]) -> None:
        for pid, roles in record.items():
            self._by_id[pid] = Roles(set(roles.get("active", ())), set(roles.get("warmup", ())),
                                     set(roles.get("standby", ())))
