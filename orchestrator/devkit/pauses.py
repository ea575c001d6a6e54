"""What the demo (and bench/handoff_pause.py) measure of each handoff: its pause.

Theory of operation: a script polling `/status` sees each handoff while it is in flight
(task, from, to, phase). Each one becomes a `Watch`, with its kind read from the same
status: `split` for a split child's first move out of its parent (the task still has
`split_from`), `drain` for a move away from a draining processor, `move` otherwise. How it
ended comes from `recent_handoffs` once it has left the list in flight: `done`;
`cancelled` by the assignor before the release (the coordinator's reason then starts
"cancelled: "; the machine takes a Cancel so only in planned and catching_up): the task
never stopped, so there is no pause; or `failed` (any other cancel: a party was lost or
failed, possibly after the release, so its gap is measured). The pause is read from the
output topic afterwards: the largest gap between consecutive outputs of the task's keys
from the moment it was seen past catching up (the release) to its end. Gaps during the
catch-up itself are not the pause: the old owner is still producing then.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Gap", "HandoffKind", "Outcome", "Watch", "handoff_kind", "handoff_outcome",
           "handoff_pauses", "pause_gaps", "percentile"]

HandoffKind = Literal["move", "split", "drain"]
Outcome = Literal["done", "cancelled", "failed"]
# the coordinator's reason for a move the assignor withdrew before its release
# (orchestrator/core/handoff/table.py: Cancel in planned and catching_up)
_WITHDRAWN = "cancelled: "
# the output timestamps come from the producers' clocks and the watch's from the demo's
# /status polls (200 ms apart): the window is widened by this much on either side
_WINDOW_SLACK_S = 0.5


@dataclass
class Watch:
    """What a `/status` poller saw of one handoff: when, and how much had to catch up."""

    task: str
    first_seen: float          # monotonic
    last_seen: float
    source: str | None = None
    target: str | None = None
    kind: HandoffKind = "move"
    outcome: Outcome = "done"
    max_lag: int = 0
    caught_up_at: float | None = None


@dataclass(frozen=True)
class Gap:
    """One handoff's pause: its task, and the wall time (s) its largest gap began."""

    task: str
    began: float
    ms: float
    watch: Watch | None = None


def handoff_kind(handoff: Mapping[str, Any], status: Mapping[str, Any]) -> HandoffKind:
    """The kind of a handoff of `/status`, from the same status document."""
    children = {t["name"] for t in status.get("tasks", []) if t.get("split_from")}
    if handoff["task"] in children:
        return "split"
    if handoff.get("from") in set(status.get("draining", [])):
        return "drain"
    return "move"


def handoff_outcome(watch: Watch, status: Mapping[str, Any]) -> Outcome:
    """How a handoff no longer in flight ended, from the status's `recent_handoffs`;
    `done` when it is not listed there any more."""
    for ended in reversed(status.get("recent_handoffs", [])):
        if (ended["task"], ended.get("from"), ended.get("to")) != (
                watch.task, watch.source, watch.target):
            continue
        if ended["phase"] != "cancelled":
            return "done"
        return "cancelled" if (ended.get("reason") or "").startswith(_WITHDRAWN) else "failed"
    return "done"


def pause_gaps(watches: Sequence[Watch], inputs: Sequence[Any], outputs: Sequence[Any],
               tasks: Mapping[str, Sequence[str]]) -> list[Gap]:
    """Per handoff whose window holds two outputs or more: its largest output gap (none
    for a handoff cancelled before its release: the task never stopped).

    Args:
        watches: the handoffs seen, in order.
        inputs: the input topic's records (confluent-kafka messages).
        outputs: the output topic's records.
        tasks: each task's partitions (`topic:N`) at the end of the run.
    """
    owner = {p: t for t, ps in tasks.items() for p in ps}
    key_task = {m.key(): owner.get(f"{m.topic()}:{m.partition()}") for m in inputs}
    times: dict[str, list[float]] = {}
    for m in outputs:
        times.setdefault(key_task.get(m.key()) or "", []).append(m.timestamp()[1] / 1000)
    wall_offset = time.time() - time.monotonic()
    gaps = []
    for watch in watches:
        if watch.outcome == "cancelled":
            continue
        began = watch.caught_up_at if watch.caught_up_at is not None else watch.last_seen
        start = began + wall_offset - _WINDOW_SLACK_S
        end = watch.last_seen + wall_offset + _WINDOW_SLACK_S
        stamps = sorted(t for t in times.get(watch.task, []) if start <= t <= end)
        if len(stamps) >= 2:
            width, at = max((b - a, a) for a, b in zip(stamps, stamps[1:], strict=False))
            gaps.append(Gap(watch.task, at, width * 1000, watch))
    return gaps


def handoff_pauses(watches: Sequence[Watch], gaps: Sequence[Gap]) -> list[dict[str, Any]]:
    """Every handoff seen, in order: `{"task", "kind", "from", "to", "outcome", "pause_ms",
    "at"}`;
    `at` is the local wall time its largest gap began (as the daemons' logs write it), to
    find it there; `pause_ms` and `at` are None when its window held under two outputs."""
    measured = {id(g.watch): g for g in gaps if g.watch is not None}
    out = []
    for w in watches:
        gap = measured.get(id(w))
        out.append({"task": w.task, "kind": w.kind, "from": w.source, "to": w.target,
                    "outcome": w.outcome, "pause_ms": None if gap is None else round(gap.ms, 1),
                    "at": None if gap is None else _clock(gap.began)})
    return out


def _clock(wall: float) -> str:
    return f"{time.strftime('%H:%M:%S', time.localtime(wall))},{int(wall % 1 * 1000):03d}"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (inclusive method); 0 for no values."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]
