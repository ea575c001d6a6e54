"""What a handoff is made of: its phases, config and persisted state, the events
that drive it and the commands it answers with (plain frozen data)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from orchestrator.core.handoff.codec import bad_record, check_offsets, record_field
from orchestrator.core.handoff.errors import LocalHandoffError

__all__ = [
    "Activated", "Cancel", "Command", "DEFAULT_ACCEPTABLE_LAG",
    "DEFAULT_ACTIVATE_TIMEOUT_S", "DEFAULT_RELEASE_TIMEOUT_S", "DeclareDead", "Event",
    "Handoff", "HandoffConfig", "LagReported", "Persist", "Phase", "ProcessorLost",
    "ReleaseAcked", "ReplicaFailed", "ResumeOwner", "SendActivate", "SendRelease", "StartWarmup",
    "StopWarmup", "TERMINAL_PHASES", "Tick", "WarmupStarted",
]


# Matches [catch_up] acceptable_lag's default: a thousand records replay in well
# under a second, which bounds the pause of a handoff.
DEFAULT_ACCEPTABLE_LAG: Final = 1000


# Matches [coordinator] release_timeout_ms: a healthy owner commits and acknowledges
# within a few heartbeats (1 s each).
DEFAULT_RELEASE_TIMEOUT_S: Final = 10.0


# Matches [coordinator] activate_timeout_ms: fencing plus a replay of at most
# acceptable_lag records, with room for a slow broker.
DEFAULT_ACTIVATE_TIMEOUT_S: Final = 30.0


# Version of the persisted record, so a future layout can still read old ones.
_RECORD_FORMAT: Final = 1


class Phase(enum.StrEnum):
    """Where a handoff is; the values are persisted and pinned
    (docs/design.md, "What is pinned")."""

    PLANNED = "planned"
    CATCHING_UP = "catching_up"
    RELEASING = "releasing"
    ACTIVATING = "activating"
    DONE = "done"
    CANCELLED = "cancelled"


TERMINAL_PHASES: Final = frozenset({Phase.DONE, Phase.CANCELLED})


_BEFORE_RELEASE: Final = frozenset({Phase.PLANNED, Phase.CATCHING_UP, Phase.RELEASING})


@dataclass(frozen=True)
class HandoffConfig:
    """Thresholds and timeouts of every handoff (from [catch_up] and [coordinator]).

    Attributes:
        acceptable_lag: records the target may still lag when the release starts.
        release_timeout_s: the source must acknowledge a release within this.
        activate_timeout_s: the target must report the task active within this.
        catch_up_timeout_s: give up a warmup that is not caught up within this
            (None: wait as long as it takes; the assignor may Cancel instead).
    """

    acceptable_lag: int = DEFAULT_ACCEPTABLE_LAG
    release_timeout_s: float = DEFAULT_RELEASE_TIMEOUT_S
    activate_timeout_s: float = DEFAULT_ACTIVATE_TIMEOUT_S
    catch_up_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.acceptable_lag < 0:
            raise LocalHandoffError(
                f"acceptable_lag={self.acceptable_lag}: must be >= 0 records "
                "(set [catch_up] acceptable_lag)")
        for name in ("release_timeout_s", "activate_timeout_s", "catch_up_timeout_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise LocalHandoffError(f"{name}={value}: must be > 0 seconds")


@dataclass(frozen=True)
class Handoff:
    """One task's move, as persisted in the coordinator stream at every transition.

    Attributes:
        task: the task's name.
        source: the old owner, or None when the task had no live owner.
        target: the new owner.
        phase: where the move is.
        since: when `phase` was entered (the driver's clock, seconds).
        final_offsets: "topic:partition" -> next offset, from the source's release
            acknowledgement; None until then, and when the target starts from the
            group's committed offsets after fencing.
        reason: why the move was cancelled or forced, for operators.
        source_declared_dead: the source is gone (lost, or declared dead by us).
        lag: the target's last known lag in records (advisory).
    """

    task: str
    source: str | None
    target: str
    phase: Phase
    since: float
    final_offsets: dict[str, int] | None = None
    reason: str = ""
    source_declared_dead: bool = False
    lag: int | None = None

    def __post_init__(self) -> None:
        if not self.task or not self.target:
            raise LocalHandoffError(f"handoff needs a task and a target, got {self!r}")
        if self.source == self.target:
            raise LocalHandoffError(
                f"task {self.task!r}: source and target are both {self.target!r}; "
                "a handoff to the current owner is a no-op, do not plan it")
        if not isinstance(self.phase, Phase):
            raise LocalHandoffError(f"task {self.task!r}: phase {self.phase!r} is not a Phase")
        if self.source is None and self.phase in _BEFORE_RELEASE:
            raise LocalHandoffError(
                f"task {self.task!r}: phase {self.phase} needs a source to release from")

    def same_but_lag(self, other: Handoff) -> bool:
        """Whether `other` is this handoff but for its lag, which is advisory: a change of
        it alone is neither a transition to persist nor a new stream record."""
        return dataclasses.replace(self, lag=other.lag) == other

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able record written to the coordinator stream."""
        record = dataclasses.asdict(self)
        record["phase"] = self.phase.value
        record["format"] = _RECORD_FORMAT
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Handoff:
        """Read a record written by `to_dict()` (unknown keys are ignored).

        Raises:
            LocalHandoffError: the record is malformed (names the field).
        """
        task = record_field(record, "task", str)
        try:
            phase = Phase(record_field(record, "phase", str))
        except ValueError:
            raise bad_record(record, "phase", f"one of {[p.value for p in Phase]}") from None
        since = record_field(record, "since", (int, float))
        offsets = record_field(record, "final_offsets", (dict, type(None)))
        if offsets is not None:
            check_offsets(offsets, lambda why: bad_record(record, "final_offsets", why))
        return cls(
            task=task,
            source=record_field(record, "source", (str, type(None))),
            target=record_field(record, "target", str),
            phase=phase,
            since=float(since),
            final_offsets=None if offsets is None else dict(offsets),
            reason=record_field(record, "reason", str, default=""),
            source_declared_dead=record_field(record, "source_declared_dead", bool, default=False),
            lag=record_field(record, "lag", (int, type(None)), default=None),
        )


@dataclass(frozen=True)
class WarmupStarted:
    """The target runs the task as a warmup (replaying S2 without output)."""

    processor_id: str | None = None  # when given, must be the target


@dataclass(frozen=True)
class LagReported:
    """The target's current lag (T1 - T2, records over S1), as the coordinator sees it."""

    lag: int


@dataclass(frozen=True)
class ReleaseAcked:
    """The source stopped, committed, and reports its final T1 ("topic:N" -> offset)."""

    final_offsets: dict[str, int]
    processor_id: str | None = None  # when given, must be the source


@dataclass(frozen=True)
class Activated:
    """The target runs the task as active and is processing with output."""

    processor_id: str | None = None  # when given, must be the target


@dataclass(frozen=True)
class ProcessorLost:
    """The liveness layer gave up on a processor (either side, or an unrelated one)."""

    processor_id: str


@dataclass(frozen=True)
class Tick:
    """Time passed; timeouts are checked against `now`."""

    now: float


@dataclass(frozen=True)
class ReplicaFailed:
    """The target reports the task `failed` (its store would not open, its activation
    or its process() raised): this move cannot finish on it."""

    error: str
    processor_id: str | None = None  # when given, must be the target


@dataclass(frozen=True)
class Cancel:
    """The operator or the assignor no longer wants this move."""

    reason: str


Event: TypeAlias = (
    WarmupStarted | LagReported | ReleaseAcked | Activated | ProcessorLost | Tick | Cancel
    | ReplicaFailed)


@dataclass(frozen=True)
class StartWarmup:
    """Assign `task` to `processor` as a warmup (rebuild state, no output)."""

    task: str
    processor: str


@dataclass(frozen=True)
class StopWarmup:
    """Drop the warmup started for this move (a no-op if the processor has none)."""

    task: str
    processor: str


@dataclass(frozen=True)
class SendRelease:
    """Tell the owner to stop fetching, commit, and acknowledge with its final T1."""

    task: str
    processor: str


@dataclass(frozen=True)
class DeclareDead:
    """Invalidate the processor's execution: its heartbeat answers alive: false."""

    processor: str


@dataclass(frozen=True)
class SendActivate:
    """Tell the new owner to fence, replay to `final_offsets`, and process with output.

    `final_offsets=None`: use the group's committed offsets read after fencing.
    """

    task: str
    processor: str
    final_offsets: dict[str, int] | None


@dataclass(frozen=True)
class ResumeOwner:
    """The old owner keeps or resumes the task as active (fencing anew if it stopped)."""

    task: str
    processor: str


@dataclass(frozen=True)
class Persist:
    """Write `handoff` to the coordinator stream before executing the next commands."""

    handoff: Handoff


Command: TypeAlias = (
    StartWarmup | StopWarmup | SendRelease | DeclareDead | SendActivate | ResumeOwner | Persist)
