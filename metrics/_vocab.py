"""The bounded vocabularies of Baton's metric labels, and the histogram buckets.

Every label value a daemon can put on a metric comes from one of the tuples below,
or is a task, processor or topic name (bounded by the job model), so a series
count never grows with traffic. Values are checked at the call site: a typo raises
instead of minting a new series that no dashboard or alert looks at.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

__all__ = [
    "AUTOSCALE_DIRECTIONS",
    "AUTOSCALE_OUTCOMES",
    "CATCH_UP_PATHS",
    "CATCH_UP_ROLES",
    "CATCH_UP_SOURCES",
    "HANDOFF_OUTCOMES",
    "HANDOFF_PHASES",
    "HEARTBEAT_OUTCOMES",
    "PAUSE_BUCKETS",
    "PHASE_BUCKETS",
    "PROCESSOR_STATES",
    "PROCESSOR_STEPS",
    "PROCESS_ERROR_OUTCOMES",
    "SPARK_BUCKETS",
    "STALL_ROLES",
    "STEP_BUCKETS",
    "TRANSACTION_OUTCOMES",
    "AutoscaleDirection",
    "AutoscaleOutcome",
    "CatchUpPath",
    "CatchUpSource",
    "HandoffOutcome",
    "HandoffPhase",
    "HeartbeatOutcome",
    "ProcessErrorOutcome",
    "ProcessorState",
    "ProcessorStep",
    "TransactionOutcome",
    "check_label",
]

# The handoff state machine's non-terminal phases (docs/design.md, "A scale-out, step by step").
HandoffPhase = Literal["planned", "catching_up", "releasing", "activating"]
HANDOFF_PHASES: tuple[HandoffPhase, ...] = ("planned", "catching_up", "releasing", "activating")

# How a handoff ends: `done` (old owner acknowledged the release), `fenced` (old owner
# declared dead, its producer fenced, final T1 = its last commit), `cancelled`.
HandoffOutcome = Literal["done", "cancelled", "fenced"]
HANDOFF_OUTCOMES: tuple[HandoffOutcome, ...] = ("done", "cancelled", "fenced")

# What a `baton autoscale` decision does: start processors, drain one, or expand the
# inputs and split the tasks; and how far it got: made (`started`), then `done` or
# `failed` (a launcher error, a processor that never registered, a refused request).
AutoscaleDirection = Literal["up", "down", "expand"]
AUTOSCALE_DIRECTIONS: tuple[AutoscaleDirection, ...] = ("up", "down", "expand")
AutoscaleOutcome = Literal["started", "done", "failed"]
AUTOSCALE_OUTCOMES: tuple[AutoscaleOutcome, ...] = ("started", "done", "failed")

# A processor as the coordinator sees it.
ProcessorState = Literal["alive", "draining", "dead"]
PROCESSOR_STATES: tuple[ProcessorState, ...] = ("alive", "draining", "dead")

# Where catch-up records were applied: the processor's own consumer, or Spark bulk.
CatchUpPath = Literal["consumer", "spark"]
CATCH_UP_PATHS: tuple[CatchUpPath, ...] = ("consumer", "spark")

# What catch-up records were: input records replayed through process(), or changelog
# records applied as they are (catch_up.source).
CatchUpSource = Literal["input", "changelog"]
CATCH_UP_SOURCES: tuple[CatchUpSource, ...] = ("input", "changelog")

# How a task's Kafka transaction ended. `fenced`: another producer took the
# transactional id (a handoff fenced this one, a zombie).
TransactionOutcome = Literal["committed", "aborted", "fenced"]
TRANSACTION_OUTCOMES: tuple[TransactionOutcome, ...] = ("committed", "aborted", "fenced")

# A processor's heartbeat round trip: answered alive, no answer, or `alive: false`.
HeartbeatOutcome = Literal["ok", "unreachable", "rejected"]
HEARTBEAT_OUTCOMES: tuple[HeartbeatOutcome, ...] = ("ok", "unreachable", "rejected")

# What `process()` raising did under `processor.on_error` (fail | skip | dlq).
ProcessErrorOutcome = Literal["fail", "skip", "dlq"]
PROCESS_ERROR_OUTCOMES: tuple[ProcessErrorOutcome, ...] = ("fail", "skip", "dlq")

# The processor's own share of a handoff: `releasing` = release seen -> final commit
# acknowledged; `activating` = activate seen -> first committed output (`pause_ms`), and
# the steps of `activating` (processor/handoff_steps.py): `fence` (init_transactions),
# `t1` (the committed offsets read), `replay` (T2 -> T1, then active), `first_read` (its
# first records fetched), `first_commit` (its first transaction committed).
ProcessorStep = Literal["releasing", "activating", "fence", "t1", "replay", "first_read",
                        "first_commit"]
PROCESSOR_STEPS: tuple[ProcessorStep, ...] = ("releasing", "activating", "fence", "t1",
                                              "replay", "first_read", "first_commit")

# The role of a task whose read stalled (processor/runtime/stalls.py): an active task,
# a warmup, a standby, or an activation replaying towards active.
STALL_ROLES: tuple[str, ...] = ("active", "warmup", "standby", "activating")

# Only a warmup is a task on the move; actives and standbys have nothing to catch up
# towards a handoff, so their lag is exported but no remaining records or ETA.
CATCH_UP_ROLES: frozenset[str] = frozenset({"warmup"})

# Handoff pause: should be the replay of `acceptable_lag` records plus one coordinator
# round trip, i.e. tens of milliseconds to seconds; the tail up to 5 min catches a
# release that ran into `release_timeout_ms` and worse.
PAUSE_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)
# Handoff phases: `releasing`/`activating` take seconds, `catching_up` can take hours
# when a large store is rebuilt (Spark bulk path), so the buckets reach 4 h.
PHASE_BUCKETS: tuple[float, ...] = (
    0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0,
)
# A processor's release/activate steps: the same range as the pause.
STEP_BUCKETS: tuple[float, ...] = PAUSE_BUCKETS
# SparkSession start: seconds for local[*], up to minutes on a busy cluster; a Spark
# bulk run: minutes to hours.
SPARK_BUCKETS: tuple[float, ...] = (
    1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0,
)


def check_label(value: str, allowed: Collection[str], label: str) -> str:
    """Return `value` if it is one of `allowed`.

    Args:
        value: the label value a caller passed.
        allowed: the label's vocabulary.
        label: the label name, for the error message.

    Returns:
        `value`, unchanged.

    Raises:
        ValueError: `value` is not in the vocabulary (a caller bug: a new value
            would be a new series that no dashboard or alert knows).
    """
    if value not in allowed:
        raise ValueError(
            f"metric label {label}={value!r} is not one of {sorted(allowed)}; "
            "add the value to metrics/_vocab.py (and the dashboard) if it is new"
        )
    return value
