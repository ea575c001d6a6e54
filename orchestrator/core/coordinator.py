"""The coordinator core: job model, processors, assignment and handoffs (no I/O).

Theory of operation
===================

The core is a plain object driven by three kinds of calls, all made by the daemon
under one lock, each with the injected clock's reading:

- messages from processors: `register()`, `heartbeat()` (both take a
  `HeartbeatRequest` and return the `HeartbeatReply`), `alive()` for the pinned
  /containerHeartbeat probe;
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
from orchestrator.core.placement import place
from orchestrator.core.settings import CoreConfig
from orchestrator.core.split import Split
from orchestrator.wire.clock import Clock
from orchestrator.wire.protocol import HeartbeatReply, HeartbeatRequest, TaskReport

__all__ = ["Coordinator", "CoreConfig", "DrainError", "ForgetError", "UnknownProcessor"]

log = logging.getLogger("baton.coordinator")


# a quiet job is placed again this often anyway (failure backoffs and standbys' lags
# change with time, not with news)
PLACE_EVERY_S = 60.0


def _roles(reports: Mapping[str, TaskReport]) -> dict[str, str]:
    return {t: str(r.role) for t, r in reports.items()}


class UnknownProcessor(LookupError):
    """An operator named a processor the coordinator does not know."""


class DrainError(RuntimeError):
    """A drain that cannot be done (for example the processor is not alive)."""


class Coordinator(CorePicture):
    """Applies processors' messages, observations and ticks to the picture, one
    reconcile step per call; see the module docstring.

    Args:
        config: thresholds and timeouts.
        clock: the injected clock (tests pass tests/clocks.py's fake one).
        model: the job model in force.
        metrics: where to record handoff phases, outcomes, pauses, invalid heartbeats.
    """

    def __init__(self, config: CoreConfig, clock: Clock, model: JobModel,
                 metrics: CoordinatorMetrics | None = None) -> None:
        super().__init__(config, clock, model, metrics,
                         lambda pid, why: self._lose(pid, why, keep_roles=False),
                         self._went_live)
        self.follow_up = False
        self.turn_wanted = False
        # what the last placement saw (see `_placement_due`)
        self._placement_news = True
        self._placed: tuple[float, JobModel] | None = None
        self._settle_by = clock.monotonic()
        if metrics is not None:
            metrics.set_generation(model.generation)
            metrics.set_views(lag_view=self.lag_samples, handoff_view=self.handoff_samples)

    # ---- restore --------------------------------------------------------

    @classmethod
    def restore(cls, config: CoreConfig, clock: Clock, records: Mapping[str, Any],
                metrics: CoordinatorMetrics | None = None) -> Coordinator | None:
        """Rebuild from coordinator-stream records; None when there is no model yet."""
        if "model" not in records:
            return None
        core = cls(config, clock, JobModel.from_record(records["model"]), metrics)
        now = clock.monotonic()
        for key, value in records.items():
            if key.startswith("processor/"):
                core.processors.add(Processor.from_record(key.partition("/")[2], value, now))
        core.roles.load(dict(records.get("assignment", {})))
        core.processors.forgotten = {str(k): str(v) for k, v in
                                     dict(records.get("forgotten", {})).items()}
        core.draining = set(dict(records.get("drain", {})).get("processors", ()))
        core.errors = list(dict(records.get("errors", {})).get("errors", ()))
        core.failures.load(dict(records.get("failures", {})), now)
        core._stream.load(records)
        core._settle_by = now + config.processor_timeout_s
        for key, value in records.items():
            if key.startswith("handoff/"):
                core.handoff_book.resume(hs.Handoff.from_dict(value))
        return core

    # ---- processors ---------------------------------------------------------------------

    def register(self, request: HeartbeatRequest, decide: bool = True) -> HeartbeatReply:
        """A processor execution starts: it becomes its id's one valid execution.

        With `decide` False the message is only taken in (the daemon decides on its own
        loop, woken by `turn_wanted`); the reply is the decision in force."""
        if self.processors.was_forgotten(request):
            return self._forgotten(request)
        now = self.clock.monotonic()
        old = self.processors.get(request.processor_id)
        if old is not None and old.execution_id != request.execution_id:
            log.warning("processor %s registered a new execution %s; execution %s is no "
                        "longer valid", old.id, request.execution_id, old.execution_id)
            self._lose(old.id, f"replaced by execution {request.execution_id}",
                       keep_roles=True)
        if old is None or old.execution_id != request.execution_id:
            self.failures.forget_processor(request.processor_id)
        processor = self.processors.register(request, now, self.clock.time())
        self.turn_wanted = self._placement_news = True
        return self._answer(processor, request, decide)

    def heartbeat(self, request: HeartbeatRequest, decide: bool = True,
                  in_force: HeartbeatReply | None = None) -> HeartbeatReply:
        """A processor's periodic report; an invalid execution is told it is dead. A
        processor id this coordinator has no record of (its stream was lost, or it is
        new) is told so: it outlived an outage and registers again. `decide`: as in
        `register()`. `in_force`: the reply this processor last got, known by the caller
        to be the decision in force still (no decision since): answered again as is."""
        processor = self.processors.valid(request)
        if processor is None:
            if self.metrics is not None:
                self.metrics.record_invalid_heartbeat()
            if self.processors.was_forgotten(request):
                return self._forgotten(request)
            unknown = self.processors.get(request.processor_id) is None
            return HeartbeatReply(alive=False, generation=self.model.generation,
                                  unknown=unknown)
        return self._answer(processor, request, decide, in_force)

    def _forgotten(self, request: HeartbeatRequest) -> HeartbeatReply:
        """The execution of a forgotten processor still runs: it is dead (it stops; a
        new execution of its id registers as any other)."""
        log.warning("execution %s of forgotten processor %s reported: told it is dead",
                    request.execution_id, request.processor_id)
        return HeartbeatReply(alive=False, generation=self.model.generation)

    def _answer(self, processor: Processor, request: HeartbeatRequest,
                decide: bool, in_force: HeartbeatReply | None = None) -> HeartbeatReply:
        before = processor.reports
        first = not processor.reported
        self.processors.seen(processor, request, self.clock.monotonic())
        if request.leaving:
            return self._leave(processor)
        if request.drain and processor.id not in self.draining:
            log.info("processor %s asks to be drained before it stops", processor.id)
            self.draining.add(processor.id)
            self.turn_wanted = self._placement_news = True
        if decide:
            self._reconcile()
        elif first or _roles(before) != _roles(processor.reports) \
                or self.handoff_book.involving(processor.id) or processor.id in self.draining:
            self.turn_wanted = True     # news a decision waits for: decide soon
            self._placement_news = True
        elif any(r.role != "active" for r in processor.reports.values()):
            self._placement_news = True     # replicas' lags: the assignor weighs them
        if not processor.valid:  # declared dead by this very reconcile
            return HeartbeatReply(alive=False, generation=self.model.generation)
        if in_force is not None and not decide:
            return in_force
        return self.reply(processor, request.generation)

    def _leave(self, processor: Processor) -> HeartbeatReply:
        """A graceful goodbye: take its released positions, then forget it."""
        self._drive_handoffs()
        log.info("processor %s left", processor.id)
        self._lose(processor.id, "left", keep_roles=False)
        self.processors.remove(processor.id)
        self.draining.discard(processor.id)
        self._reconcile()
        return HeartbeatReply(alive=True, generation=self.model.generation, stop=True)

    def _lose(self, pid: str, reason: str, *, keep_roles: bool) -> None:
        """Invalidate `pid`'s execution; its handoffs learn it; its roles go (or stay
        listed for the same id's new execution, whose activation fences the old one)."""
        if self.processors.invalidate(pid, reason, self.clock.time()) is None:
            return  # unknown, or already invalid
        self._placement_news = True
        if not keep_roles:
            self.roles.drop(pid)
        for task in [h.task for h in self.handoff_book.involving(pid)]:
            current = self.handoff_book.handoffs.get(task)  # a nested loss may have ended it
            if current is not None and pid in (current.source, current.target):
                self.handoff_book.step(current, hs.ProcessorLost(pid))

    def drain(self, pid: str) -> dict[str, Any]:
        """Scale in: move `pid`'s tasks away (with catch-up), then tell it to stop.

        Raises:
            UnknownProcessor: no such processor.
            DrainError: it is not alive.
        """
        processor = self.processors.get(pid)
        if processor is None:
            raise UnknownProcessor(f"no processor {pid!r}; known: "
                                   f"{', '.join(p.id for p in self.processors) or 'none'}")
        if not processor.valid:
            raise DrainError(f"processor {pid!r} is not alive ({processor.reason}): its "
                             f"tasks are already being placed elsewhere; to remove it for "
                             f"good, run `baton forget --processor {pid}`")
        self.draining.add(pid)
        self._placement_news = True
        self._reconcile()
        return {"processor": pid, "draining": True,
                "tasks": sorted(self.roles.peek(pid).active)}

    def forget(self, pid: str) -> dict[str, Any]:
        """Remove a dead processor for good (orchestrator/core/forgetting.py).

        Raises:
            UnknownProcessor: no such processor.
            ForgetError: it is alive, or a handoff in flight still names it.
        """
        processor = self.processors.get(pid)
        if processor is None:
            raise UnknownProcessor(f"no processor {pid!r}; known: "
                                   f"{', '.join(p.id for p in self.processors) or 'none'}")
        why = forgetting.refusal(processor, self._in_handoffs())
        if why is not None:
            raise ForgetError(why)
        self._forget(processor, "at an operator's request")
        self._reconcile()
        return {"processor": pid, "forgotten": True, "execution_id": processor.execution_id,
                "reason": processor.reason}

    def _forget(self, processor: Processor, why: str) -> None:
        log.info("processor %s (execution %s, dead: %s) forgotten %s", processor.id,
                 processor.execution_id, processor.reason, why)
        self.processors.forget(processor.id)
        self.roles.drop(processor.id)
        self.draining.discard(processor.id)
        self.failures.forget_processor(processor.id)
        self._placement_news = True

    def _in_handoffs(self) -> set[str]:
        return {pid for h in self.handoffs.values() for pid in (h.source, h.target)
                if pid is not None}

    def _forget_dead(self) -> None:
        """Forget every processor dead for `forget_dead_after_s` (0: never)."""
        after = self.config.forget_dead_after_s
        for pid in forgetting.due(self.processors, self._in_handoffs(), self.clock.time(),
                                  after):
            processor = self.processors.get(pid)
            assert processor is not None
            self._forget(processor, f"after {after:g} s dead "
                                    f"(coordinator.forget_dead_after_ms)")

    # ---- observations -------------------------------------------------------------------

    def observe_offsets(self, low: Mapping[str, int], high: Mapping[str, int],
                        committed: Mapping[str, int]) -> None:
        """Watermarks and the job group's committed offsets, from the daemon's admin I/O."""
        self.low.update(low)
        self.high.update(high)
        self.committed.update(committed)

    def apply_expansion(self, expansion: Expansion) -> None:
        """The monitor (or POST /expand) grew the model: new generation, barriers."""
        self.model = expansion.model
        for topic, (old, new) in expansion.grown.items():
            log.info("input %s grew from %d to %d partitions: generation %d, barriers %s",
                     topic, old, new, self.model.generation,
                     {c: self.model.barriers[c] for c in expansion.parents
                      if c.startswith(topic + ":")})
            if self.metrics is not None:
                self.metrics.record_expansion(topic)
        self.errors = [e for e in self.errors if not e.startswith("expansion refused")]
        if self.metrics is not None:
            self.metrics.set_generation(self.model.generation)
        self._reconcile()

    def apply_split(self, model: JobModel, splits: Sequence[Split]) -> None:
        """`baton split` recorded new child tasks: each stays with its parent's owner
        (inside the parent) until its own handoff moves it."""
        self.model = model
        for split in splits:
            log.info("task %s split: child %s takes %s (S2 %s), generation %d", split.parent,
                     split.child, ", ".join(split.partitions), ", ".join(split.s2),
                     model.generation)
        if self.metrics is not None:
            self.metrics.set_generation(self.model.generation)
        self._reconcile()

    def apply_settlement(self, model: JobModel, markers: Mapping[str, int]) -> None:
        """The daemon wrote barrier markers (child -> offset) with `model`: the
        children's barriers are settled (orchestrator/wire/barrier.py)."""
        self.model = model
        log.info("expansion barriers settled by markers: %s, generation %d",
                 {c: f"{model.barriers[c][0]}@{o}" for c, o in sorted(markers.items())},
                 model.generation)
        if self.metrics is not None:
            self.metrics.set_generation(self.model.generation)
        self._reconcile()

    def adopt_model(self, model: JobModel) -> None:
        """A model the daemon derived at start (the changelog mapping): it is the one in
        force now, sent to every processor whose generation is older."""
        self.model = model
        if self.metrics is not None:
            self.metrics.set_generation(self.model.generation)

    def _went_live(self, child: str) -> None:
        """A split child's first activation was sent: from now on it is a task of its own."""
        self.model = self.model.went_live(child)
        log.info("split child %r goes live: generation %d", child, self.model.generation)
        if self.metrics is not None:
            self.metrics.set_generation(self.model.generation)

    def refuse_expansion(self, reason: str) -> None:
        """A growth the grouping refuses: keep the old model, surface the reason."""
        message = f"expansion refused: {reason}"
        if message not in self.errors:
            log.error("%s; the job keeps generation %d", message, self.model.generation)
            self.errors = [e for e in self.errors if not e.startswith("expansion refused")]
            self.errors.append(message)

    def tick(self) -> bool:
        """Time passed: timeouts, then one reconcile step. Returns whether it placed
        (when it did not, nothing the stream records changed: no need to diff them)."""
        self.turn_wanted = False
        return self._reconcile()

    # ---- the reconcile step -------------------------------------------------------------

    def _reconcile(self) -> bool:
        now = self.clock.monotonic()
        for processor in self.processors.silent(now, self.config.processor_timeout_s):
            log.warning("processor %s (execution %s) silent for %.1f s: lost; its tasks are "
                        "placed again", processor.id, processor.execution_id,
                        now - processor.last_seen)
            self._lose(processor.id, f"silent for more than {self.config.processor_timeout_s}"
                       " s (coordinator.processor_timeout_ms)", keep_roles=False)
        self.failures.observe(self, now)
        self._drive_handoffs()
        self._forget_dead()
        placed = self._settled() and self._placement_due(now)
        if placed:
            self._placement_news = bool(self.handoffs)  # a handoff may end any turn
            self._placed = (now, self.model)
            self.roles.keep_only({p.id for p in self.processors.live()})
            self.follow_up = place(self)
        self.handoff_book.count_pauses(self)
        if self.metrics is not None:
            live = self.processors.live()
            self.metrics.set_processors({
                "alive": sum(p.id not in self.draining for p in live),
                "draining": sum(p.id in self.draining for p in live),
                "dead": sum(not p.valid for p in self.processors)})
            self.metrics.set_failed_tasks(len(self.failed_tasks()))
        return placed

    def _placement_due(self, now: float) -> bool:
        """Does the assignor have anything new to weigh? A large job's placement costs
        enough CPU that running it on every tick of a quiet job starves the threads
        answering heartbeats (docs/performance.md, "Measurements behind the code").
        Conservative: news
        from a processor (a registration, a loss, changed roles, replicas' lags), a
        handoff in flight, a follow-up, a drain, a failure, a new model, or
        `PLACE_EVERY_S` since the last placement (time-based decisions)."""
        if self._placement_news or self.follow_up or self.handoffs or self.draining:
            return True
        if self._placed is None or self._placed[1] is not self.model:
            return True
        return bool(self.failures.by_task) or now - self._placed[0] >= PLACE_EVERY_S

    def _drive_handoffs(self) -> None:
        self.handoff_book.drive(self)

    def _settled(self) -> bool:
        """After a restart, wait for every valid processor's first report."""
        return (self.clock.monotonic() >= self._settle_by
                or all(p.reported for p in self.processors.live()))
