"""Processors' registrations and heartbeats, answered from the decision in force.

Heartbeats are cheap: they take the report in and answer from the decision in force;
they do not decide. While a decision holds the core's lock, a plain heartbeat is
answered with the reply its processor last got (still the decision in force: a decision
publishes only when it releases the lock; orchestrator/daemon/replies_in_force.py) and
its report waits in an inbox for the next holder of the lock. Decisions run on the
daemon's loop (orchestrator/daemon/decisions.py), which the guarded core's `wake`
rouses when a report carries news a decision waits for.
A heartbeat may also wait (a long poll, `wait_s`) while its processor has nothing to
do: it is answered as soon as a decision changes its listing.
"""

from __future__ import annotations

from orchestrator.daemon.guarded_core import GuardedCore
from orchestrator.wire.clock import Clock, Deadline
from orchestrator.wire.protocol import HeartbeatReply, HeartbeatRequest

__all__ = ["REGISTER_WAIT_S", "Heartbeats", "InvalidReport"]

# a registration waits at most this long for the loop's next decision
REGISTER_WAIT_S = 2.0


class InvalidReport(ValueError):
    """A heartbeat reports a task (or a partition) the job does not have."""


class Heartbeats:
    """Answers processors: registrations, plain heartbeats and long polls.

    Args:
        guard: the core behind its lock.
        waits: bounds the waits of heartbeats and registrations; real time, whatever
            the core's clock.
    """

    def __init__(self, guard: GuardedCore, waits: Clock) -> None:
        self._guard = guard
        self._waits = waits
        self.loop_decides = False           # set by the leader once its loop decides

    @property
    def unpersisted(self) -> bool:
        """A loop write failed: the next heartbeat persists before it answers."""
        return self._guard.unpersisted

    def alive(self, execution_id: str) -> bool:
        with self._guard.lock:
            return self._guard.core.picture.alive(execution_id)

    def check_reports(self, request: HeartbeatRequest) -> None:
        """Refuse reports of tasks the job does not have (no lock: models are immutable
        and replaced whole).

        Raises:
            InvalidReport: naming the task.
        """
        problem = self._guard.core.picture.model.report_problem(
            (t.task, t.offsets().keys()) for t in request.tasks)
        if problem is not None:
            raise InvalidReport(f"processor {request.processor_id}: {problem}")

    def register(self, request: HeartbeatRequest) -> HeartbeatReply:
        """Persisted before it is answered (a restarted coordinator must not take the
        new execution for a zombie of an older one) and answered with a decision that
        counts it: the loop's next one, whose decision and write a burst of
        registrations shares (or at once, when no loop decides: `loop_decides`)."""
        guard, core = self._guard, self._guard.core
        with guard.deciding():
            if not self.loop_decides:
                reply = core.register(request)
                guard.commit()
                return reply
            core.register(request, decide=False)
            guard.wake.set()        # the loop's decision is persisted before any answer
            decisions = guard.decisions
            deadline = Deadline.after(self._waits, REGISTER_WAIT_S)
            while guard.decisions == decisions and (left := deadline.remaining()) > 0:
                guard.wait(left)
            if guard.unpersisted:
                guard.commit()      # the loop's write failed: nothing unpersisted goes out
            processor = core.picture.processors.valid(request)
            if processor is None:
                return HeartbeatReply(alive=False, generation=core.picture.model.generation)
            return core.picture.reply(processor, request.generation)

    def try_heartbeat(self, request: HeartbeatRequest) -> HeartbeatReply | None:
        """A plain heartbeat (no wait, not leaving) answered without blocking: under
        the lock when it is free, else from the reply cache; None: neither (then
        `heartbeat` from a thread), or `unpersisted`. Why: a large job's decision holds
        the lock long enough that heartbeats waiting it out set their p99, and a thread
        per heartbeat costs more than the heartbeat (docs/performance.md, "Measurements
        behind the code")."""
        guard = self._guard
        if request.leaving:
            return None
        if not guard.lock.acquire(blocking=False):
            return self._cached(request)
        try:
            if guard.unpersisted:
                return None
            guard.take_inbox()
            reply = guard.core.heartbeat(request, decide=False,
                                         in_force=guard.replies.get(request))
            guard.want_turn()
            guard.replies.remember(request, reply)
            return reply
        finally:
            guard.lock.release()

    def _cached(self, request: HeartbeatRequest) -> HeartbeatReply | None:
        """The reply `request`'s processor last got, if it is still the decision in
        force for the generation it holds; its report is taken in later."""
        reply = self._guard.replies.get(request)
        if reply is None or self._guard.unpersisted:
            return None
        self._guard.replies.queue(request)
        return reply

    def heartbeat(self, request: HeartbeatRequest, wait_s: float = 0.0) -> HeartbeatReply:
        """Take the report in, answer from the decision in force; with `wait_s`, wait
        up to that long for a decision that changes this processor's listing, as long
        as it has nothing to do (`Coordinator.in_line`)."""
        guard, core = self._guard, self._guard.core
        with guard.lock:
            guard.replies.forget(request.processor_id)
            guard.take_inbox()
            if guard.unpersisted or request.leaving:
                guard.replies.publish()
            if guard.unpersisted:
                guard.commit()      # a loop write failed: nothing unpersisted goes out
            reply = core.heartbeat(request, decide=False)
            if request.leaving:
                guard.commit()
            guard.want_turn()
            if wait_s <= 0 or not reply.alive or reply.stop \
                    or request.generation != reply.generation \
                    or not core.picture.in_line(request.processor_id):
                return reply
            return self._await_change(request, reply, wait_s)

    def _await_change(self, request: HeartbeatRequest, reply: HeartbeatReply,
                      wait_s: float) -> HeartbeatReply:
        """Caller holds the lock (the condition's wait releases it meanwhile)."""
        core = self._guard.core
        deadline = Deadline.after(self._waits, wait_s)
        while (left := deadline.remaining()) > 0:
            self._guard.wait(left)
            processor = core.picture.processors.valid(request)
            if processor is None:
                return HeartbeatReply(alive=False, generation=core.picture.model.generation)
            now = core.picture.reply(processor, request.generation)
            if now != reply or not core.picture.in_line(processor.id):
                return now
        return reply
