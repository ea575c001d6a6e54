"""The coordinator core: job model, processors, assignment and handoffs (no I/O).

Theory of operation
===================

The core is a plain object driven by three kinds of calls, all made by the daemon
under one lock, each with the injected clock's reading. What it knows is its
`picture` (orchestrator/core/picture.py), which it holds and changes; the queries
(the pinned /containerHeartbeat probe's `picture.alive()`, lags, replies, the views)
are the picture's.

- messages from processors: `register()`, `heartbeat()` (both take a
  `HeartbeatRequest` and return the `HeartbeatReply`);
- observations from the daemon's I/O edge: `observe_offsets()` (watermarks and the
  job group's committed offsets), `apply_expansion()` / `refuse_expansion()` from
  the partition monitor;
- `tick()`, every few hundred milliseconds, and operator requests (`drain()`,
  `forget()`).

Every call ends in `_reconcile()`, which is level-triggered like the wire protocol:
it looks at the whole current picture and moves it one step towards the target.

1. Liveness: a valid processor silent for `processor_timeout` is lost; a lost,
   replaced or declared-dead execution loses its roles (its tasks become ownerless),
   and every handoff it takes part in gets `ProcessorLost`.
   Then failed reports are acted on (orchestrator/core/failures.py): the processor
   loses the task, is excluded for it for a backoff, and a handoff it targets ends.
   A processor dead for `forget_dead_after_s` is forgotten
   (orchestrator/core/forgetting.py).
2. Handoffs (orchestrator/core/handoff/, driven by orchestrator/core/handoff_driver.py) get events
   derived from the reports: the target holds the replica (WarmupStarted), its lag
   (LagReported), the source reports the task "released" (ReleaseAcked), the target
   reports it "active" (Activated), and a Tick. Their commands edit the *roles* we
   list for each processor (orchestrator/core/roles.py): a release is the task leaving
   the source's `active`, an activation the task entering the target's `active`. A
   task is never listed active on two live processors: the target is listed only
   after the source was unlisted (release acknowledged, or the source declared dead
   and so invalid).
3. Placement (orchestrator/core/placement.py) runs the KIP-441 assignor
   (orchestrator/core/assignment/) with the current owners,
   replicas and lags. An ownerless task is listed active on its new home at once
   (its activation fences the old producer). A task whose owner must change becomes
   a handoff: released at once when the target is caught up, else warmed up first
   (at most `max_warmups` catch-ups at a time). Draining processors are left out of
   the assignor's input, so their tasks are placed elsewhere and leave through
   handoffs; a draining processor that holds nothing is told to stop.

Lag (orchestrator/core/lag.py), the records persisted before any answer
(orchestrator/core/stream_records.py) and the reply a processor gets
(orchestrator/core/replies.py) each live in their own module. After a restart no new
moves start until every known processor reported again (or timed out), so the
assignor never decides on an empty picture.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from metrics import CoordinatorMetrics
from orchestrator.core import forgetting
from orchestrator.core import handoff as hs
from orchestrator.core.forgetting import ForgetError
from orchestrator.core.liveness import Processor
from orchestrator.core.model import Expansion, JobModel
from orchestrator.core.picture import CorePicture
from orchestrator.core.placement import PlacementPace, place
from orchestrator.core.settings import CoreConfig
from orchestrator.core.split import Split
from orchestrator.wire.clock import Clock
from orchestrator.wire.protocol import HeartbeatReply, HeartbeatRequest, TaskReport

__all__ = ["Coordinator", "CoreConfig", "DrainError", "ForgetError", "UnknownProcessor"]

log = logging.getLogger("baton.coordinator")


def _roles(reports: Mapping[str, TaskReport]) -> dict[str, str]:
    return {t: str(r.role) for t, r in reports.items()}


class UnknownProcessor(LookupError):
    """An operator named a processor the coordinator does not know."""


class DrainError(RuntimeError):
    """A drain that cannot be done (for example the processor is not alive)."""


class Coordinator:
    """Applies processors' messages, observations and ticks to its picture, one
    reconcile step per call; see the module docstring.

    Args:
        config: thresholds and timeouts.
        clock: the injected clock (tests pass tests/clocks.py's fake one).
        model: the job model in force.
        metrics: where to record handoff phases, outcomes, pauses, invalid heartbeats.
    """

    def __init__(self, config: CoreConfig, clock: Clock, model: JobModel,
                 metrics: CoordinatorMetrics | None = None) -> None:
        # what the core knows, and the queries placement, lag, replies and views ask of it
        self.picture = CorePicture(config, clock, model, metrics,
                                   lambda pid, why: self._lose(pid, why, keep_roles=False),
                                   self._went_live)
        self.turn_wanted = False
        self._pace = PlacementPace(settle_by=clock.monotonic())
        if metrics is not None:
            metrics.set_generation(model.generation)
            metrics.set_views(lag_view=self.picture.lag_samples,
                              handoff_view=self.picture.handoff_samples)

    # ---- restore --------------------------------------------------------

    @classmethod
    def restore(cls, config: CoreConfig, clock: Clock, records: Mapping[str, Any],
                metrics: CoordinatorMetrics | None = None) -> Coordinator | None:
        """Rebuild from coordinator-stream records; None when there is no model yet."""
        if "model" not in records:
            return None
        core = cls(config, clock, JobModel.from_record(records["model"]), metrics)
        picture = core.picture
        now = clock.monotonic()
        for key, value in records.items():
            if key.startswith("processor/"):
                picture.processors.add(Processor.from_record(key.partition("/")[2], value,
                                                             now))
        picture.roles.load(dict(records.get("assignment", {})))
        picture.processors.forgotten = {str(k): str(v) for k, v in
                                        dict(records.get("forgotten", {})).items()}
        picture.draining = set(dict(records.get("drain", {})).get("processors", ()))
        picture.errors = list(dict(records.get("errors", {})).get("errors", ()))
        picture.failures.load(dict(records.get("failures", {})), now)
        picture.stream.load(records)
        core._pace.settle_by = now + config.processor_timeout_s
        for key, value in records.items():
            if key.startswith("handoff/"):
                picture.handoff_book.resume(hs.Handoff.from_dict(value))
        return core

    # ---- processors ---------------------------------------------------------------------

    def register(self, request: HeartbeatRequest, decide: bool = True) -> HeartbeatReply:
        """A processor execution starts: it becomes its id's one valid execution.

        With `decide` False the message is only taken in (the daemon decides on its own
        loop, woken by `turn_wanted`); the reply is the decision in force."""
        picture = self.picture
        if picture.processors.was_forgotten(request):
            return _forgotten(request, picture.model)
        now = picture.clock.monotonic()
        old = picture.processors.get(request.processor_id)
        if old is not None and old.execution_id != request.execution_id:
            log.warning("processor %s registered a new execution %s; execution %s is no "
                        "longer valid", old.id, request.execution_id, old.execution_id)
            self._lose(old.id, f"replaced by execution {request.execution_id}",
                       keep_roles=True)
        if old is None or old.execution_id != request.execution_id:
            picture.failures.forget_processor(request.processor_id)
        processor = picture.processors.register(request, now, picture.clock.time())
        self.turn_wanted = self._pace.news = True
        return self._answer(processor, request, decide)

    def heartbeat(self, request: HeartbeatRequest, decide: bool = True,
                  in_force: HeartbeatReply | None = None) -> HeartbeatReply:
        """A processor's periodic report; an invalid execution is told it is dead. A
        processor id this coordinator has no record of (its stream was lost, or it is
        new) is told so: it outlived an outage and registers again. `decide`: as in
        `register()`. `in_force`: the reply this processor last got, known by the caller
        to be the decision in force still (no decision since): answered again as is."""
        picture = self.picture
        processor = picture.processors.valid(request)
        if processor is None:
            if picture.metrics is not None:
                picture.metrics.record_invalid_heartbeat()
            if picture.processors.was_forgotten(request):
                return _forgotten(request, picture.model)
            unknown = picture.processors.get(request.processor_id) is None
            return HeartbeatReply(alive=False, generation=picture.model.generation,
                                  unknown=unknown)
        return self._answer(processor, request, decide, in_force)

    def _answer(self, processor: Processor, request: HeartbeatRequest,
                decide: bool, in_force: HeartbeatReply | None = None) -> HeartbeatReply:
        picture = self.picture
        before = processor.reports
        first = not processor.reported
        picture.processors.seen(processor, request, picture.clock.monotonic())
        if request.leaving:
            return self._leave(processor)
        if request.drain and processor.id not in picture.draining:
            log.info("processor %s asks to be drained before it stops", processor.id)
            picture.draining.add(processor.id)
            self.turn_wanted = self._pace.news = True
        if decide:
            self._reconcile()
        elif first or _roles(before) != _roles(processor.reports) \
                or picture.handoff_book.involving(processor.id) \
                or processor.id in picture.draining:
            self.turn_wanted = True     # news a decision waits for: decide soon
            self._pace.news = True
        elif any(r.role != "active" for r in processor.reports.values()):
            self._pace.news = True     # replicas' lags: the assignor weighs them
        if not processor.valid:  # declared dead by this very reconcile
            return HeartbeatReply(alive=False, generation=picture.model.generation)
        if in_force is not None and not decide:
            return in_force
        return picture.reply(processor, request.generation)

    def _leave(self, processor: Processor) -> HeartbeatReply:
        """A graceful goodbye: take its released positions, then forget it."""
        picture = self.picture
        picture.handoff_book.drive(picture)
        log.info("processor %s left", processor.id)
        self._lose(processor.id, "left", keep_roles=False)
        picture.processors.remove(processor.id)
        picture.draining.discard(processor.id)
        self._reconcile()
        return HeartbeatReply(alive=True, generation=picture.model.generation, stop=True)

    def _lose(self, pid: str, reason: str, *, keep_roles: bool) -> None:
        """Invalidate `pid`'s execution; its handoffs learn it; its roles go (or stay
        listed for the same id's new execution, whose activation fences the old one)."""
        picture = self.picture
        if picture.processors.invalidate(pid, reason, picture.clock.time()) is None:
            return  # unknown, or already invalid
        self._pace.news = True
        if not keep_roles:
            picture.roles.drop(pid)
        book = picture.handoff_book
        for task in [h.task for h in book.involving(pid)]:
            current = book.handoffs.get(task)  # a nested loss may have ended it
            if current is not None and pid in (current.source, current.target):
                book.step(current, hs.ProcessorLost(pid))

    def drain(self, pid: str) -> dict[str, Any]:
        """Scale in: move `pid`'s tasks away (with catch-up), then tell it to stop.

        Raises:
            UnknownProcessor: no such processor.
            DrainError: it is not alive.
        """
        picture = self.picture
        processor = picture.processors.get(pid)
        if processor is None:
            raise UnknownProcessor(f"no processor {pid!r}; known: "
                                   f"{', '.join(p.id for p in picture.processors) or 'none'}")
        if not processor.valid:
            raise DrainError(f"processor {pid!r} is not alive ({processor.reason}): its "
                             f"tasks are already being placed elsewhere; to remove it for "
                             f"good, run `baton forget --processor {pid}`")
        picture.draining.add(pid)
        self._pace.news = True
        self._reconcile()
        return {"processor": pid, "draining": True,
                "tasks": sorted(picture.roles.peek(pid).active)}

    def forget(self, pid: str) -> dict[str, Any]:
        """Remove a dead processor for good (orchestrator/core/forgetting.py).

        Raises:
            UnknownProcessor: no such processor.
            ForgetError: it is alive, or a handoff in flight still names it.
        """
        picture = self.picture
        processor = picture.processors.get(pid)
        if processor is None:
            raise UnknownProcessor(f"no processor {pid!r}; known: "
                                   f"{', '.join(p.id for p in picture.processors) or 'none'}")
        why = forgetting.refusal(processor, _in_handoffs(picture))
        if why is not None:
            raise ForgetError(why)
        self._forget(processor, "at an operator's request")
        self._reconcile()
        return {"processor": pid, "forgotten": True, "execution_id": processor.execution_id,
                "reason": processor.reason}

    def _forget(self, processor: Processor, why: str) -> None:
        log.info("processor %s (execution %s, dead: %s) forgotten %s", processor.id,
                 processor.execution_id, processor.reason, why)
        picture = self.picture
        picture.processors.forget(processor.id)
        picture.roles.drop(processor.id)
        picture.draining.discard(processor.id)
        picture.failures.forget_processor(processor.id)
        self._pace.news = True

    def _forget_dead(self) -> None:
        """Forget every processor dead for `forget_dead_after_s` (0: never)."""
        picture = self.picture
        after = picture.config.forget_dead_after_s
        for pid in forgetting.due(picture.processors, _in_handoffs(picture),
                                  picture.clock.time(), after):
            processor = picture.processors.get(pid)
            assert processor is not None
            self._forget(processor, f"after {after:g} s dead "
                                    f"(coordinator.forget_dead_after_ms)")

    # ---- observations and new models ------------------------------------------------

    def observe_offsets(self, low: Mapping[str, int], high: Mapping[str, int],
                        committed: Mapping[str, int]) -> None:
        """Watermarks and the job group's committed offsets, from the daemon's admin I/O."""
        self.picture.low.update(low)
        self.picture.high.update(high)
        self.picture.committed.update(committed)

    def apply_expansion(self, expansion: Expansion) -> None:
        """The monitor (or POST /expand) grew the model: new generation, barriers."""
        picture = self.picture
        self.adopt_model(expansion.model)
        for topic, (old, new) in expansion.grown.items():
            log.info("input %s grew from %d to %d partitions: generation %d, barriers %s",
                     topic, old, new, picture.model.generation,
                     {c: picture.model.barriers[c] for c in expansion.parents
                      if c.startswith(topic + ":")})
            if picture.metrics is not None:
                picture.metrics.record_expansion(topic)
        picture.errors = [e for e in picture.errors if not e.startswith("expansion refused")]
        self._reconcile()

    def apply_split(self, model: JobModel, splits: Sequence[Split]) -> None:
        """`baton split` recorded new child tasks: each stays with its parent's owner
        (inside the parent) until its own handoff moves it."""
        self.adopt_model(model)
        for split in splits:
            log.info("task %s split: child %s takes %s (S2 %s), generation %d", split.parent,
                     split.child, ", ".join(split.partitions), ", ".join(split.s2),
                     model.generation)
        self._reconcile()

    def apply_settlement(self, model: JobModel, markers: Mapping[str, int]) -> None:
        """The daemon wrote barrier markers (child -> offset) with `model`: the
        children's barriers are settled (orchestrator/wire/barrier.py)."""
        self.adopt_model(model)
        log.info("expansion barriers settled by markers: %s, generation %d",
                 {c: f"{model.barriers[c][0]}@{o}" for c, o in sorted(markers.items())},
                 model.generation)
        self._reconcile()

    def adopt_model(self, model: JobModel) -> None:
        """`model` is the one in force now, sent to every processor whose generation is
        older (called as it is for a model the daemon derived at start: the changelog
        mapping)."""
        self.picture.model = model
        if self.picture.metrics is not None:
            self.picture.metrics.set_generation(model.generation)

    def _went_live(self, child: str) -> None:
        """A split child's first activation was sent: from now on it is a task of its own."""
        self.adopt_model(self.picture.model.went_live(child))
        log.info("split child %r goes live: generation %d", child,
                 self.picture.model.generation)

    def refuse_expansion(self, reason: str) -> None:
        """A growth the grouping refuses: keep the old model, surface the reason."""
        picture = self.picture
        message = f"expansion refused: {reason}"
        if message not in picture.errors:
            log.error("%s; the job keeps generation %d", message, picture.model.generation)
            picture.errors = [e for e in picture.errors
                              if not e.startswith("expansion refused")]
            picture.errors.append(message)

    def tick(self) -> bool:
        """Time passed: timeouts, then one reconcile step. Returns whether it placed
        (when it did not, nothing the stream records changed: no need to diff them)."""
        self.turn_wanted = False
        return self._reconcile()

    # ---- the reconcile step -------------------------------------------------------------

    def _reconcile(self) -> bool:
        picture = self.picture
        now = picture.clock.monotonic()
        timeout = picture.config.processor_timeout_s
        for processor in picture.processors.silent(now, timeout):
            log.warning("processor %s (execution %s) silent for %.1f s: lost; its tasks are "
                        "placed again", processor.id, processor.execution_id,
                        now - processor.last_seen)
            self._lose(processor.id, f"silent for more than {timeout}"
                       " s (coordinator.processor_timeout_ms)", keep_roles=False)
        picture.failures.observe(picture, now)
        picture.handoff_book.drive(picture)
        self._forget_dead()
        placed = self._pace.due(picture, now)
        if placed:
            self._pace.placed(picture, now)
            picture.roles.keep_only({p.id for p in picture.processors.live()})
            picture.follow_up = place(picture)
        picture.handoff_book.count_pauses(picture)
        if picture.metrics is not None:
            live = picture.processors.live()
            picture.metrics.set_processors({
                "alive": sum(p.id not in picture.draining for p in live),
                "draining": sum(p.id in picture.draining for p in live),
                "dead": sum(not p.valid for p in picture.processors)})
            picture.metrics.set_failed_tasks(len(picture.failed_tasks()))
        return placed



def _forgotten(request: HeartbeatRequest, model: JobModel) -> HeartbeatReply:
    """The execution of a forgotten processor still runs: it is dead (it stops; a new
    execution of its id registers as any other)."""
    log.warning("execution %s of forgotten processor %s reported: told it is dead",
                request.execution_id, request.processor_id)
    return HeartbeatReply(alive=False, generation=model.generation)


def _in_handoffs(picture: CorePicture) -> set[str]:
    """The processors a handoff in flight names."""
    return {pid for h in picture.handoffs.values() for pid in (h.source, h.target)
            if pid is not None}
