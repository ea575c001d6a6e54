"""Read-only views of the coordinator core: the pinned status JSON, what is pending
before the job is balanced, and the dry-run plan of a scale-out or scale-in.

Pure functions over a `CorePicture` (a coordinator's `picture`); the API serves them as
JSON and the CLI renders them. They never change the core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.core import lag as lags
from orchestrator.core.assignment import AssignmentError, ProcessorSnapshot, TaskInfo, assign
from orchestrator.core.autoscale import Load, Recommendation, Sample
from orchestrator.core.liveness import Processor
from orchestrator.core.picture import CorePicture
from orchestrator.wire.changelog import changelog_partition

__all__ = ["DEFAULT_CATCH_UP_RATE", "PlanError", "autoscale_sample", "pending", "plan",
           "recommendation", "status"]

# Records per second one warmup replays when no warmup has reported a rate yet: a
# conservative figure for a Python process() through the consumer path (the Spark bulk
# path is much faster); `plan` says when it used this default.
DEFAULT_CATCH_UP_RATE = 5000.0


class PlanError(ValueError):
    """A plan request naming processors that cannot be added or removed."""


def status(core: CorePicture) -> dict[str, Any]:
    """The pinned `baton status --json` document, plus balance and error details."""
    now = core.clock.monotonic()
    waiting = pending(core)
    return {
        "job": core.config.job,
        "generation": core.model.generation,
        "balanced": not waiting,
        "pending": waiting,
        "catch_up_source": core.config.catch_up_source,
        "processors": [_processor(core, p.id) for p in core.processors],
        "tasks": [{"name": task, "partitions": parts, "active": core.holder(task),
                   "lag": _input_lag(core, task),
                   "failed": core.failures.describe(task, now),
                   "stalled": _stalled(core, task),
                   **({"split_from": core.model.pending[task]}
                      if task in core.model.pending else {}),
                   **({"changelog_partition": core.model.changelog[task]}
                      if task in core.model.changelog else {})}
                  for task, parts in core.model.tasks.items()],
        "handoffs": [{"task": h.task, "from": h.source, "to": h.target,
                      "phase": h.phase.value, "lag": core.lag(h.task, h.target),
                      "seconds_in_phase": round(max(0.0, now - h.since), 3),
                      "reason": h.reason}
                     for h in core.handoffs.values()],
        "recent_handoffs": [{"task": h.task, "from": h.source, "to": h.target,
                             "phase": h.phase.value, "reason": h.reason}
                            for h in core.handoff_book.history[-10:]],
        "draining": sorted(core.draining),
        "errors": list(core.errors) + [_stuck(core, t) for t in core.failed_tasks()
                                        if _exhausted(core, t)],
        "inputs": [{"topic": t, "partitions": n} for t, n in core.model.grouping.inputs],
        "barriers": {c: _barrier(core, c) for c in core.model.barriers},
    }


def _stalled(core: CorePicture, task: str) -> list[dict[str, Any]]:
    """The reads of `task` its processors report stalled (processor/runtime/stalls.py):
    who, in which role, which partitions."""
    return [{"processor": p.id, "role": report.role, "partitions": list(report.stalled)}
            for p in core.processors.live()
            if (report := p.reports.get(task)) is not None and report.stalled]


def _barrier(core: CorePicture, child: str) -> dict[str, Any]:
    """A child partition's expansion barrier: `settled` once its marker is written (the
    offset is the marker's; before, the floor it will not fall below, and `due` says
    when it is settled), `reached` once the task consuming the parent has passed it."""
    parent, offset = core.model.barriers[child]
    settled = child not in core.model.unsettled
    position = core.consumed_position(parent)
    out: dict[str, Any] = {"parent": parent, "offset": offset, "settled": settled,
                           "reached": settled and position is not None and position >= offset}
    if not settled:
        out["due"] = core.model.unsettled[child]
    return out


def _processor(core: CorePicture, pid: str) -> dict[str, Any]:
    processor = core.processors.get(pid)
    assert processor is not None
    roles = core.roles.peek(pid)
    reported = {t: r.role for t, r in processor.reports.items()}
    return {"id": pid, "alive": processor.valid, "metrics_url": processor.metrics_url,
            "active": sorted(roles.active), "warmup": sorted(roles.warmup),
            "standby": sorted(roles.standby), "draining": pid in core.draining,
            "disk_full": processor.disk_full,
            "execution_id": processor.execution_id, "reason": processor.reason,
            # how long a dead one has been dead: what `baton forget` (or
            # coordinator.forget_dead_after_ms) is decided on
            "dead_for_s": None if processor.died_at is None
            else round(max(0.0, core.clock.time() - processor.died_at), 3),
            "reported": reported,
            "seconds_since_heartbeat": round(
                max(0.0, core.clock.monotonic() - processor.last_seen), 3)}


def _input_lag(core: CorePicture, task: str) -> int | None:
    """How far the task's consumption is behind its inputs' ends (None: unknown)."""
    total = 0
    consumed = set(core.consumed(task))
    for partition, t1 in core.t1(task).items():
        if partition not in consumed:
            continue            # a split child's ancestors are its parent's to consume
        if t1 is None or partition not in core.high:
            return None
        total += max(0, core.high[partition] - t1)
    return total


def _candidates(core: CorePicture) -> list[str]:
    return [p.id for p in core.processors.live() if p.id not in core.draining]


def _exhausted(core: CorePicture, task: str) -> bool:
    return core.failures.exhausted(task, _candidates(core))


def _stuck(core: CorePicture, task: str) -> str:
    """Why a failed task runs nowhere, with each processor's last error."""
    now = core.clock.monotonic()
    seen = "; ".join(f"{f['processor']} after {f['attempts']} attempt(s): {f['error']}"
                     for f in core.failures.describe(task, now))
    if _exhausted(core, task):
        return (f"task {task!r}: failed on every processor, not retried ({seen}); fix the "
                f"cause and restart a processor (a new execution gets the task again)")
    return f"task {task!r}: failed, retried after a backoff ({seen})"


def pending(core: CorePicture) -> list[str]:
    """Why the job is not balanced yet; empty when it is.

    Balanced: every task active on a live processor that reports it active and
    consumes all of its partitions, no read of a task stalled, no handoff in flight, the
    assignor wants no move, and no draining processor still holds a task.
    """
    out: list[str] = []
    live = core.processors.live()
    if not live:
        out.append("no live processor: start one with 'baton processor -c FILE --id ID'")
    for h in core.handoffs.values():
        lag = core.lag(h.task, h.target)
        out.append(f"task {h.task!r}: moving {h.source} -> {h.target}, {h.phase.value}"
                   + (f" (lag {lag} records)" if lag is not None else ""))
    for task, partitions in core.model.tasks.items():
        if task in core.handoffs:
            continue
        owner = core.holder(task)           # a pending split child runs inside its parent
        report = core.report(owner, core.model.pending.get(task, task))
        if owner is None and task in core.failures.by_task:
            out.append(_stuck(core, task))
        elif owner is None:
            out.append(f"task {task!r}: not active on any processor")
        elif report is None or report.role != "active":
            out.append(f"task {task!r}: {owner} has not reported it active yet")
        elif missing := [p for p in partitions if p not in report.committed]:
            out.append(f"task {task!r}: {owner} does not consume {', '.join(missing)} yet "
                       f"(generation {core.model.generation})")
    for task in core.model.tasks:
        out += [f"task {task!r}: {s['processor']}'s {s['role']} read of "
                f"{', '.join(s['partitions'])} has stalled (being recovered)"
                for s in _stalled(core, task)]
    if core.follow_up and not core.handoffs:
        out.append("the assignor has more moves to make (warm-ups pending)")
    out += _newcomers_without_tasks(core, live)
    for pid in sorted(core.draining):
        roles = core.roles.peek(pid)
        if core.processors.get(pid) is not None and not roles.empty():
            out.append(f"processor {pid}: draining, still holds "
                       f"{len(roles.active) + len(roles.warmup) + len(roles.standby)} task(s)")
    return out


def _newcomers_without_tasks(core: CorePicture, live: Sequence[Processor]) -> list[str]:
    """A processor that just joined and holds nothing while there are tasks enough for
    everyone: the target assignment has not reached it yet (its first reply, or the
    reconcile after it, is still to come)."""
    if len(core.model.tasks) < len(live):
        return []
    arriving = {h.target for h in core.handoffs.values()}
    return [f"processor {p.id} joined and holds no task yet" for p in live
            if p.id not in core.draining and p.id not in arriving
            and core.roles.peek(p.id).empty()]


def plan(core: CorePicture, add: Sequence[str], remove: Sequence[str]) -> dict[str, Any]:
    """Dry run: the balanced end state with `add` joined and `remove` gone.

    Returns:
        The moves (task, from, to), each with its S2 size in records (what the new
        owner replays) and estimated catch-up time, and the totals.

    Raises:
        PlanError: an added id already runs, or a removed id is unknown.
    """
    live = [p.id for p in core.processors.live() if p.id not in core.draining]
    clash = sorted(set(add) & set(live))
    unknown = sorted(set(remove) - set(live))
    if clash:
        raise PlanError(f"cannot add {', '.join(clash)}: already running")
    if unknown:
        raise PlanError(f"cannot remove {', '.join(unknown)}: not a live, non-draining "
                        f"processor (live: {', '.join(live) or 'none'})")
    ids = sorted((set(live) - set(remove)) | set(add))
    current = _current_owners(core)
    # as placement does: a pending split child counts as ownerless to the assignor
    owned = {t: o for t, o in current.items() if t not in core.model.pending}
    states = [ProcessorSnapshot(pid, 1, frozenset(t for t, o in owned.items() if o == pid),
                             lags={t: 0 for t in core.model.tasks}) for pid in ids]
    try:
        result = assign([TaskInfo(t) for t in core.model.tasks], states,
                        core.config.assignment)
    except AssignmentError as exc:
        raise PlanError(str(exc)) from exc
    rate, source = _catch_up_rate(core)
    changes: list[dict[str, Any]] = []
    total = 0
    for task, target in sorted(result.owners().items()):
        if current.get(task) != target:
            size = _replay_size(core, task, target)
            total += size
            changes.append({"task": task, "from": current.get(task), "to": target,
                          "records": size, "eta_seconds": round(size / rate, 1)})
    parallel = max(1, min(core.config.assignment.max_warmups, len(changes)))
    return {
        "add": sorted(add), "remove": sorted(remove), "moves": changes,
        "total_records": total, "eta_seconds": round(total / (rate * parallel), 1),
        "rate": {"records_per_second": rate, "source": source,
                 "parallel_warmups": parallel},
        "processors": [{"id": p.id, "active": list(p.active)} for p in result.processors],
    }


def _current_owners(core: CorePicture) -> dict[str, str]:
    """Owners now, with moves in flight counted where they are going."""
    owners = {t: o for t in core.model.tasks if (o := core.holder(t)) is not None}
    owners.update({t: h.target for t, h in core.handoffs.items()})
    return owners


def _replay_size(core: CorePicture, task: str, target: str) -> int:
    """S2 in records: the target's replica lag; else, with catch_up.source = "changelog",
    the task's changelog partition as retained; else the whole retained input (for a
    split child: its ancestors up to their barriers, then its own partitions)."""
    lag = core.lag(task, target)
    if lag is not None:
        return lag
    number = core.model.changelog.get(task)
    if core.config.catch_up_source == "changelog" and number is not None:
        partition = changelog_partition(core.config.job, number)
        if partition in core.high:
            return max(0, core.high[partition] - core.low.get(partition, 0))
    total = 0
    barrier = {a.partition: a.end for a in lags.ancestry_of(core.model, task)}   # split children
    for partition, t1 in core.t1(task).items():
        end = t1 if t1 is not None else core.high.get(partition, 0)
        end = min(end, barrier.get(partition, end))
        total += max(0, end - core.low.get(partition, 0))
    return total


def _catch_up_rate(core: CorePicture) -> tuple[float, str]:
    """The mean replay rate warmups reported, or the stated default."""
    rates = [r.rate for p in core.processors.live() for r in p.reports.values()
             if r.role in ("warmup", "standby") and r.rate > 0]
    if rates:
        return sum(rates) / len(rates), "measured"
    return DEFAULT_CATCH_UP_RATE, "default"


def autoscale_sample(core: CorePicture) -> Sample:
    """What the autoscaling recommendation reads of the core now
    (orchestrator/core/autoscale.py): each live, non-draining processor's records/s on
    its active tasks and busy share, the inputs' end offsets, the job's lag, and how
    long a scale-out's warmups would take (one processor's share of the tasks, each
    replaying its S2 at the measured catch-up rate, `max_warmups` at a time)."""
    live = [p for p in core.processors.live() if p.id not in core.draining]
    loads = {p.id: Load(sum(r.rate for r in p.reports.values() if r.role == "active"),
                        p.busy or 0.0) for p in live}
    partitions = {q for parts in core.model.tasks.values() for q in parts}
    lags = [_input_lag(core, t) for t in core.model.tasks]
    rate, _ = _catch_up_rate(core)
    sizes = [_replay_size(core, t, "") for t in core.model.tasks]
    moved = -(-len(sizes) // (len(live) + 1)) if sizes else 0
    rounds = -(-moved // max(1, core.config.assignment.max_warmups))
    warmup_s = (sum(sizes) / len(sizes) / rate) * rounds if sizes else 0.0
    return Sample(core.clock.monotonic(), loads, sum(core.high.get(q, 0) for q in partitions),
                  sum(x for x in lags if x is not None), len(core.model.tasks), warmup_s)


def recommendation(found: Recommendation | None) -> dict[str, Any]:
    """The pinned `recommended_processors` of `baton status --json`, and beside it the
    recommendation's reason and estimates (`autoscale`)."""
    if found is None:
        return {"recommended_processors": None, "autoscale": None}
    return {"recommended_processors": found.processors, "autoscale": {
        "current": found.current, "direction": found.direction, "reason": found.reason,
        "capacity_per_processor": _rounded(found.capacity_per_processor),
        "demand": _rounded(found.demand), "input_rate": _rounded(found.input_rate),
        "lag": found.lag, "expand": found.expand, "inputs": found.inputs}}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
