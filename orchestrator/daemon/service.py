"""The coordinator service: the core behind one lock, persisted before every answer.

The HTTP handlers (uvicorn's threads), the tick loop and the partition monitor (the
daemon's main thread) all go through this object. Each operation runs the core
under the lock, then writes the core's pending changes to the coordinator stream
(one transaction) before returning, so an answer never carries state that a
restarted coordinator would not find.

Heartbeats are cheap: they take the report in and answer from the decision in force;
they do not decide. While a decision holds the lock, a plain heartbeat is answered with
the reply its processor last got (still the decision in force: a decision publishes
only when it releases the lock; orchestrator/daemon/replies_in_force.py) and its report
waits in an inbox for the next holder of the lock. Decisions (liveness, handoffs,
placement) run in `tick()` on the daemon's loop, which `wake` rouses when a report
carries news a decision waits for.
A heartbeat may also wait (a long poll, `wait_s`) while its processor has nothing to
do: it is answered as soon as a decision changes its listing.

Input growth and offsets (admin I/O, outside the core lock) are
orchestrator/daemon/growth.py's; writing the stream is
orchestrator/daemon/stream_writer.py's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from orchestrator.core import views
from orchestrator.core.coordinator import Coordinator
from orchestrator.core.split import SplitError
from orchestrator.daemon.growth import Admin, InputGrowth, WriteMarkers
from orchestrator.daemon.replies_in_force import RepliesInForce
from orchestrator.daemon.stream_writer import PersistRecords, StreamWriter
from orchestrator.kafka.stream import FencedError
from orchestrator.wire.clock import Clock, Deadline, SystemClock
from orchestrator.wire.protocol import HeartbeatReply, HeartbeatRequest

__all__ = ["CoordinatorService", "InvalidReport"]

log = logging.getLogger("baton.coordinator")

# a registration waits at most this long for the loop's next decision
REGISTER_WAIT_S = 2.0


# processors whose lag samples refresh_views copies per hold of the core's lock
_VIEW_CHUNK = 50


class InvalidReport(ValueError):
    """A heartbeat reports a task (or a partition) the job does not have."""


class CoordinatorService:
    """Thread-safe operations over the core; see the module docstring.

    Args:
        core: the coordinator core.
        persist: writes a batch of changes in one transaction (raises on failure).
        admin: admin I/O for offsets and expansion.
        inputs: the job's input topics, in order (`job.inputs`).
        info: extra keys for /status (the coordinator's own URLs).
        waits: bounds the waits of heartbeats and registrations; real time, whatever
            the core's clock (the system clock by default).
    """

    def __init__(self, core: Coordinator, persist: PersistRecords, admin: Admin,
                 inputs: Sequence[str], info: Mapping[str, Any] | None = None,
                 waits: Clock | None = None) -> None:
        self.core = core
        self._waits = waits or SystemClock()
        self._info = dict(info or {})
        self.lock = threading.RLock()
        self._decided = threading.Condition(self.lock)
        self._unpersisted = False
        self._decisions = 0                 # tick() calls: a registration waits for one
        self.loop_decides = False           # set by the leader once its loop decides
        # whether the lease holds, i.e. processors can be heard (set by the leader)
        self.answering: Callable[[], bool] = lambda: True
        self.wake = threading.Event()       # a decision is wanted (or this one is fenced)
        self.writer = StreamWriter(persist, core.clock, self.wake)
        self.growth = InputGrowth(self, self.writer, admin, inputs)
        self._views: tuple[list[Any], list[Any]] = ([], [])
        # published as a lock holder that may change a decision lets go
        self._replies = RepliesInForce()
        if core.metrics is not None:
            core.metrics.set_views(lag_view=lambda: self._views[0],
                                   handoff_view=lambda: self._views[1])

    def commit(self) -> None:
        """Write the core's pending changes (caller holds the lock or is alone).

        Raises:
            FencedError: another coordinator took over (also recorded in `fenced`).
            StreamError: the write failed; the changes stay pending for the next try.
        """
        changes = self.core.pending_changes()
        if changes:
            self._unpersisted = True
            self.writer.write(changes)
            self.core.confirm(changes)
        self._unpersisted = False
        with self.lock:
            self._decided.notify_all()      # waiting heartbeats look at the new decision

    @property
    def fenced(self) -> FencedError | None:
        """The fencing a write met (another coordinator took over), if any."""
        return self.writer.fenced

    @property
    def last_write(self) -> float:
        """When the stream was last written (the clock's monotonic reading)."""
        return self.writer.last_write

    def keepalive(self, record: Mapping[str, Any] | None) -> None:
        """Write the "leader" record (None: resign, a standby may lead at once).

        Why: standbys take the stream's silence for the leader's death, and a leader
        fenced by a newer one only learns it when it writes. Not under the core's
        lock: a busy core must not delay the record that keeps the lease.
        """
        self.writer.write({"leader": None if record is None else dict(record)})

    @contextmanager
    def deciding(self) -> Iterator[None]:
        """The lock, for an operation that may change what heartbeats are told."""
        with self.lock:
            try:
                yield
            finally:
                self._replies.publish()

    def _take_inbox(self) -> None:
        """Caller holds the lock: the reports answered while it was busy, in order."""
        for request in self._replies.take():
            self.core.heartbeat(request, decide=False)
        if self.core.turn_wanted:
            self.wake.set()

    # ---- processors -------------------------------------------------------------------

    def alive(self, execution_id: str) -> bool:
        with self.lock:
            return self.core.alive(execution_id)

    def check_reports(self, request: HeartbeatRequest) -> None:
        """Refuse reports of tasks the job does not have (no lock: models are immutable
        and replaced whole).

        Raises:
            InvalidReport: naming the task.
        """
        problem = self.core.model.report_problem(
            (t.task, t.positions.keys()) for t in request.tasks)
        if problem is not None:
            raise InvalidReport(f"processor {request.processor_id}: {problem}")

    def register(self, request: HeartbeatRequest) -> HeartbeatReply:
        """Persisted before it is answered (a restarted coordinator must not take the
        new execution for a zombie of an older one) and answered with a decision that
        counts it: the loop's next one, whose decision and write a burst of
        registrations shares (or at once, when no loop decides: `loop_decides`)."""
        with self.deciding():
            if not self.loop_decides:
                reply = self.core.register(request)
                self.commit()
                return reply
            self.core.register(request, decide=False)
            self.wake.set()         # the loop's decision is persisted before any answer
            decisions = self._decisions
            deadline = Deadline.after(self._waits, REGISTER_WAIT_S)
            while self._decisions == decisions and (left := deadline.remaining()) > 0:
                self._decided.wait(left)
            if self._unpersisted:
                self.commit()       # the loop's write failed: nothing unpersisted goes out
            processor = self.core.processors.valid(request)
            if processor is None:
                return HeartbeatReply(alive=False, generation=self.core.model.generation)
            return self.core.reply(processor, request.generation)

    @property
    def unpersisted(self) -> bool:
        """A loop write failed: the next heartbeat persists before it answers."""
        return self._unpersisted

    def try_heartbeat(self, request: HeartbeatRequest) -> HeartbeatReply | None:
        """A plain heartbeat (no wait, not leaving) answered without blocking: under
        the lock when it is free, else from the reply cache; None: neither (then
        `heartbeat` from a thread), or `unpersisted`. Why: a large job's decision holds
        the lock long enough that heartbeats waiting it out set their p99, and a thread
        per heartbeat costs more than the heartbeat (docs/performance.md, "Measurements
        behind the code")."""
        if request.leaving:
            return None
        if not self.lock.acquire(blocking=False):
            return self._cached(request)
        try:
            if self._unpersisted:
                return None
            self._take_inbox()
            reply = self.core.heartbeat(request, decide=False,
                                        in_force=self._replies.get(request))
            if self.core.turn_wanted:
                self.wake.set()
            self._replies.remember(request, reply)
            return reply
        finally:
            self.lock.release()

    def _cached(self, request: HeartbeatRequest) -> HeartbeatReply | None:
        """The reply `request`'s processor last got, if it is still the decision in
        force for the generation it holds; its report is taken in later."""
        reply = self._replies.get(request)
        if reply is None or self._unpersisted:
            return None
        self._replies.queue(request)
        return reply

    def heartbeat(self, request: HeartbeatRequest, wait_s: float = 0.0) -> HeartbeatReply:
        """Take the report in, answer from the decision in force; with `wait_s`, wait
        up to that long for a decision that changes this processor's listing, as long
        as it has nothing to do (`Coordinator.in_line`)."""
        with self.lock:
            self._replies.forget(request.processor_id)
            self._take_inbox()
            if self._unpersisted or request.leaving:
                self._replies.publish()
            if self._unpersisted:
                self.commit()       # a loop write failed: nothing unpersisted goes out
            reply = self.core.heartbeat(request, decide=False)
            if request.leaving:
                self.commit()
            if self.core.turn_wanted:
                self.wake.set()
            if wait_s <= 0 or not reply.alive or reply.stop \
                    or request.generation != reply.generation \
                    or not self.core.in_line(request.processor_id):
                return reply
            return self._await_change(request, reply, wait_s)

    def _await_change(self, request: HeartbeatRequest, reply: HeartbeatReply,
                      wait_s: float) -> HeartbeatReply:
        """Caller holds the lock (the condition's wait releases it meanwhile)."""
        deadline = Deadline.after(self._waits, wait_s)
        while (left := deadline.remaining()) > 0:
            self._decided.wait(left)
            processor = self.core.processors.valid(request)
            if processor is None:
                return HeartbeatReply(alive=False, generation=self.core.model.generation)
            now = self.core.reply(processor, request.generation)
            if now != reply or not self.core.in_line(processor.id):
                return now
        return reply

    # ---- operators --------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        with self.lock:
            return {**views.status(self.core), **self._info}

    def plan(self, add: Sequence[str], remove: Sequence[str]) -> dict[str, Any]:
        with self.lock:
            return views.plan(self.core, add, remove)

    def drain(self, processor: str) -> dict[str, Any]:
        with self.deciding():
            result = self.core.drain(processor)
            self.commit()
            return result

    def expand(self, topic: str, partitions: int) -> dict[str, Any]:
        """Grow an input topic and apply the expansion at once (POST /expand)."""
        return self.growth.expand(topic, partitions)

    def split(self, dry_run: bool) -> dict[str, Any]:
        """Split every task that can split (POST /split); record it unless `dry_run`.

        Idempotent: a second call finds nothing new to split and changes nothing.

        Raises:
            SplitError: the grouping cannot split (``single``).
        """
        if self.core.config.catch_up_source != "input":
            raise SplitError(
                f"catch_up.source = {self.core.config.catch_up_source!r}: a split child's "
                "state is in its parent's changelog partition, mixed with the keys the "
                "parent keeps, and Baton does not rebuild a child from it (yet); split "
                "with catch_up.source = \"input\" (the default: the child replays its "
                "parent's input through process()), then switch back: the children get "
                "changelog partitions of their own at the next coordinator start")
        with self.lock:
            model, splits = self.core.model.plan_split()
            if splits and not dry_run:
                self._replies.publish()
                self.core.apply_split(model, splits)
                self.commit()
            return {"splits": [s.to_json() for s in splits], "tasks": len(model.tasks),
                    "generation": model.generation, "recorded": bool(splits) and not dry_run}

    # ---- the daemon's loops -----------------------------------------------------------

    def tick(self) -> None:
        """Decide (the daemon's loop), persist, then answer the waiting heartbeats."""
        with self.lock:
            self._take_inbox()
            if not self.answering():
                # heartbeats get 503 while the lease lapses (a broker away, a stall):
                # a processor's silence must not count against it meanwhile
                self.core.processors.excuse(self.core.clock.monotonic())
            placed = self.core.tick()
            self._decisions += 1
            if placed or self._unpersisted:
                try:
                    self.commit()
                finally:
                    self._replies.publish()
            else:   # nothing changed: no records to diff, the replies in force stay so
                self._decided.notify_all()

    def refresh_views(self) -> None:
        """Copy what /metrics shows of the core, so a scrape never waits on the lock;
        a few processors per hold of the lock, because a large job's samples taken at
        once would hold it long enough to delay every heartbeat."""
        with self.lock:
            live = list(self.core.processors.live())
            handoffs = self.core.handoff_samples()
        lags: list[Any] = []
        for start in range(0, len(live), _VIEW_CHUNK):
            time.sleep(0)   # hand the GIL over: the event loop answering heartbeats waits
            with self.lock:
                lags += self.core.lag_samples(p for p in live[start:start + _VIEW_CHUNK]
                                              if p.valid)
        self._views = (lags, handoffs)

    def sync_partitions(self, counts: Mapping[str, int]) -> None:
        """The monitor saw these partition counts: expand, or refuse and say why."""
        self.growth.sync_partitions(counts)

    def settle_barriers(self, write: WriteMarkers) -> bool:
        """Settle the expansion barriers that are due; returns whether any was."""
        return self.growth.settle_barriers(write)

    def refresh_offsets(self) -> None:
        """Watermarks and committed offsets, for lags."""
        self.growth.refresh_offsets()
