"""The processor <-> coordinator wire protocol (JSON over HTTP), shared by both daemons.

Level-triggered on purpose: every heartbeat reply carries the processor's whole
assignment, and every heartbeat carries the processor's whole view of its tasks, so
a lost or repeated message never leaves the two sides disagreeing for long.

- A task in `assignment.active` that the processor does not run actively is
  activated: fence the task's transactional id (init_transactions), replay the
  store from T2 to the group's committed offsets without output, then process with
  output. The coordinator lists a task as active on a new owner only after the old
  owner reported it `released`, or was declared dead (its producer is then fenced).
- An active task missing from `assignment.active` is released: stop fetching,
  commit the open transaction, report it as `released` with the final T1.
- `warmup`/`standby` tasks replay S2 through `process()` without output, never past
  the owner's committed offsets, and report T2; with catch_up.source = "changelog"
  they apply the task's changelog partition instead, report the input offsets it
  carried as their T2 and their lag in changelog records.
- A task report carries T1 (`committed`: active, released) or T2 (`applied`: a
  replica, a replaying activation), never one field for both.
- Anything else the processor holds is dropped (store kept on disk).
"""

from __future__ import annotations

from typing import Any, Literal, NewType

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "T1_ROLES",
    "AppliedOffsets",
    "CommittedOffsets",
    "RoleListing",
    "Barrier",
    "HeartbeatReply",
    "HeartbeatRequest",
    "Role",
    "TaskReport",
]

Role = Literal["active", "activating", "warmup", "standby", "released", "failed"]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


# "topic:partition" -> next offset: T1, a task's committed offsets, and T2, how far a
# replica's store has applied (docs/design.md, "Words")
CommittedOffsets = NewType("CommittedOffsets", dict[str, int])
AppliedOffsets = NewType("AppliedOffsets", dict[str, int])
# the roles whose report carries T1; the others' carries T2
T1_ROLES: tuple[Role, ...] = ("active", "released")


class TaskReport(_Message):
    """What a processor says about one task it holds or has just released."""

    task: str = Field(min_length=1, max_length=512)
    role: Role
    # T1: active (its committed offsets) and released (its final T1)
    committed: CommittedOffsets = Field(default_factory=lambda: CommittedOffsets({}))
    # T2: warmup, standby and a replaying activation (what its store has applied)
    applied: AppliedOffsets = Field(default_factory=lambda: AppliedOffsets({}))
    # warmup/standby: T1 - T2 as the processor sees it (the coordinator recomputes it)
    lag: int | None = Field(default=None, ge=0)
    # records/s over the last reporting interval: committed by an active task, replayed
    # by a replica (its catch-up rate)
    rate: float = Field(default=0.0, ge=0)
    error: str | None = Field(default=None, max_length=4000)
    # active only: the pause (ms) between activation and the first committed output
    pause_ms: float | None = Field(default=None, ge=0)
    # partitions whose read has stalled (processor/runtime/stalls.py), until they move
    stalled: list[str] = Field(default_factory=list, max_length=100_000)

    @model_validator(mode="before")
    @classmethod
    def _from_positions(cls, data: Any) -> Any:
        """A processor of the previous version reports T1 or T2 as `positions`, by its
        role: an upgraded coordinator still reads it (docs/operations.md, "Upgrades
        under traffic")."""
        if isinstance(data, dict) and "positions" in data:
            data = dict(data)
            offsets = data.pop("positions")
            data["committed" if data.get("role") in T1_ROLES else "applied"] = offsets
        return data

    def offsets(self) -> dict[str, int]:
        """What its role carries: T1 (active, released) or T2 (the others)."""
        return self.committed if self.role in T1_ROLES else self.applied


class HeartbeatRequest(_Message):
    processor_id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")
    execution_id: str = Field(min_length=1, max_length=200)
    metrics_url: str | None = Field(default=None, max_length=500)
    tasks: list[TaskReport] = Field(default_factory=list, max_length=100_000)
    # set by a processor that finished draining or is shutting down gracefully
    leaving: bool = False
    # set by a processor told to stop (SIGTERM) with processor.drain_on_stop_ms: it asks
    # to be drained, its tasks handed over warm, before it stops
    drain: bool = False
    # set while its state directory's disk is short of space: it takes no new task
    disk_full: bool = False
    # the share of the last second or more its main loop worked rather than waited for
    # records (processor/runtime/load.py): with its tasks' rates, its capacity
    busy: float | None = Field(default=None, ge=0, le=1)
    # the job model generation the processor holds; when current, the reply leaves the
    # model out (optional: a processor that does not send it always gets the model)
    generation: int | None = Field(default=None, ge=0)
    # a long poll: the reply may wait up to this long (capped by the coordinator) for
    # a decision that changes this processor's assignment, while it has nothing to do
    wait_ms: int | None = Field(default=None, ge=0, le=60_000)


class RoleListing(_Message):
    active: list[str] = Field(default_factory=list)
    warmup: list[str] = Field(default_factory=list)
    standby: list[str] = Field(default_factory=list)


class Barrier(_Message):
    """Partition expansion barrier: start `child` only once `parent` reached `offset`.

    Until `settled`, `offset` is only a floor: the parent's end when the expansion was
    seen; the child waits for the marker that settles it (orchestrator/wire/barrier.py).
    """

    parent: str
    offset: int = Field(ge=0)
    settled: bool = True


class HeartbeatReply(_Message):
    alive: bool
    generation: int = 0
    # the job model: task -> its input partitions ("topic:N")
    tasks: dict[str, list[str]] = Field(default_factory=dict)
    barriers: dict[str, Barrier] = Field(default_factory=dict)
    # split children not live yet -> their parent: the parent's owner consumes the
    # child's partitions inside the parent task until the child's handoff releases them
    embedded: dict[str, str] = Field(default_factory=dict)
    # every split child not live yet -> its parent (embedded, or being handed over); a
    # parent's owner drops a child's keys from its store once the child left this map
    pending: dict[str, str] = Field(default_factory=dict)
    # catch_up.source = "changelog": task -> its partition of baton.<job>.changelog
    # (orchestrator/wire/changelog.py); sent with the model, empty otherwise
    changelog: dict[str, int] = Field(default_factory=dict)
    assignment: RoleListing = Field(default_factory=RoleListing)
    # active tasks of this processor that another one is catching up on (planned or
    # catching_up): their release is near, so the processor long-polls for it
    moving: list[str] = Field(default_factory=list)
    # drain finished: exit 0 once every task is released
    stop: bool = False
    # with alive false: the coordinator has no record of this processor id at all (it
    # lost its stream): register again instead of stopping
    unknown: bool = False
    # the request named the current generation: `tasks`, `barriers`, `pending` and
    # `changelog` are left out (empty), the processor keeps the model it has
    same_model: bool = False
