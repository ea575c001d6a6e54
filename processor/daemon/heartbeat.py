"""The heartbeat monitor (after SAMZA-871): the processor's only link to the coordinator.

It runs on its own thread and only exchanges snapshots: it sends the latest task
reports the main loop published and hands back the latest reply; it never touches a
consumer, producer or store. On `alive: false` (a newer execution of this id exists) it
tells the owner to stop without committing. An *unreachable* coordinator stops nothing:
exactly-once rests on transactional fencing, not on reachability, so active tasks keep
processing and warm-ups keep replaying; only handoffs wait for it. Past
`coordinator_grace_ms` the outage is logged as an error (once per outage); the monitor
keeps knocking, and a coordinator that lost its state registers this execution again
from its next heartbeat.

It also watches the main loop, which says when it comes round (`loop_came_round`). A
loop stuck in a call that never returns (a job's process(), a client's destroy) would
hold its tasks for good while the heartbeats said all was well; past `loop_timeout_s`
the monitor stops the processor instead (exit 3, which a supervisor restarts), and the
coordinator places its tasks elsewhere.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from tenacity import stop_after_attempt

from metrics import HeartbeatOutcome
from orchestrator.wire.client import CoordinatorClient, CoordinatorError
from orchestrator.wire.clock import Clock, Deadline, SystemClock
from orchestrator.wire.health import Probe
from orchestrator.wire.protocol import HeartbeatReply, HeartbeatRequest, TaskReport
from orchestrator.wire.tls import TlsSettings
from orchestrator.wire.token import TokenError, read_token
from processor.daemon import health

__all__ = ["HeartbeatMonitor"]

log = logging.getLogger("baton.processor.heartbeat")

_REQUEST_TIMEOUT_S = 5.0
_REGISTER = "/processors/register"
_HEARTBEAT = "/processors/heartbeat"
# after telling the main loop to stop, give it this long before the process is ended
_HARD_EXIT_AFTER_S = 10.0
EXIT_DEAD = 3
# while this processor is about to be activated, it asks for its orders this often:
# the wait for the next heartbeat is part of the handoff pause
_FAST_INTERVAL_S = 0.025
# while the coordinator does not answer, a failed heartbeat is logged at most this often
# (with the count since the last line); the first failure of an outage always is
_FAILURE_LOG_EVERY_S = 30.0


class HeartbeatMonitor(threading.Thread):
    """Polls the coordinator at a fixed rate; records replies and liveness verdicts."""

    def __init__(self, url: str | Sequence[str], token_file: Path, processor_id: str,
                 execution_id: str,
                 interval_s: float, grace_s: float,
                 snapshot: Callable[[], list[TaskReport]],
                 metrics_url: str | None = None,
                 on_heartbeat: Callable[[HeartbeatOutcome], None] | None = None,
                 clock: Clock | None = None, tls: TlsSettings | None = None,
                 disk_full: Callable[[], bool] = lambda: False,
                 loop_timeout_s: float = float("inf")) -> None:
        super().__init__(name="baton-heartbeat", daemon=True)
        self.clock = clock or SystemClock()
        self.url = url if isinstance(url, str) else " or ".join(url)
        self.token_file = token_file
        self.processor_id = processor_id
        self.execution_id = execution_id
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.snapshot = snapshot
        self.disk_full = disk_full
        self.loop_timeout_s = loop_timeout_s
        self._loop_at = self.clock.monotonic()
        self._heard_at = -float("inf")          # the coordinator's last answer
        self._loop_thread: int | None = None    # set by the loop's first round
        self.metrics_url = metrics_url
        self.on_heartbeat = on_heartbeat or (lambda outcome: None)
        self.dead = threading.Event()
        self.dead_reason = ""
        self.stopping = threading.Event()
        self.registered = threading.Event()
        self.drain = False              # set by the owner: ask to be drained (SIGTERM)
        self.busy: float | None = None  # set by the owner: its main loop's busy share
        self._poked = threading.Event()
        self._fast = False
        self._turned_fast_at = -float("inf")
        self.generation: int | None = None  # set by the owner: the job model it holds
        # the newest reply, and the tasks its heartbeat reported failed
        self._reply: tuple[HeartbeatReply, frozenset[str]] | None = None
        # a reply the main loop has not yet acted on and published (see _wait_ms)
        self._unsettled = False
        # the next heartbeat waits for settle() (see _next_wait)
        self._awaiting_settle = False
        self._lock = threading.Lock()
        # the one coordinator client of both daemons; no retries of its own (the next
        # heartbeat is the retry), the token file re-read per request (rotation)
        self._client = CoordinatorClient(url, lambda: read_token(token_file),
                                         retry={"stop": stop_after_attempt(1)},
                                         timeout=_REQUEST_TIMEOUT_S, tls=tls)

    @property
    def fast(self) -> bool:
        """Set by the owner while a handoff is imminent: heartbeats then come often, as
        long polls when nothing is in flight."""
        return self._fast

    @fast.setter
    def fast(self, imminent: bool) -> None:
        now = self.clock.monotonic()
        if imminent and not self._fast and now - self._turned_fast_at >= _FAST_INTERVAL_S:
            # a warmup just caught up, or another processor began catching up on a task
            # active here: the coordinator waits for this report (it starts the
            # handoff), not for the rest of a heartbeat_interval_ms. At most once a fast
            # interval: a lag hovering at acceptable_lag must not turn it into a flood.
            self._turned_fast_at = now
            self._poked.set()
        self._fast = imminent

    def loop_came_round(self) -> None:
        """The main loop finished a round (the monitor's watch, module doc)."""
        self._loop_at = self.clock.monotonic()
        self._loop_thread = threading.get_ident()

    def loop_ended(self) -> None:
        """The main loop is done: a graceful stop may take as long as it needs."""
        self._loop_at = float("inf")

    def live(self) -> Probe:
        """`/healthz` (processor/daemon/health.py)."""
        return health.live(max(0.0, self.clock.monotonic() - self._loop_at), self.loop_timeout_s)

    def ready(self) -> Probe:
        """`/readyz` (processor/daemon/health.py)."""
        return health.ready(self.registered.is_set(), self.clock.monotonic() - self._heard_at,
                            self.grace_s, self.dead.is_set())

    def _loop_stuck(self) -> bool:
        stuck_s = self.clock.monotonic() - self._loop_at
        if stuck_s <= self.loop_timeout_s:
            return False
        log.error("the main loop is stuck here (the call that never returned is last):\n%s",
                  self._loop_stack())
        self._die(f"its main loop has not come round for {stuck_s:.0f}s "
                  f"(processor.loop_timeout_ms): a call in it never returned")
        return True

    def _loop_stack(self) -> str:
        """Where the main loop's thread is now: what an operator needs to report a call
        that hangs (a client library's, or the job's own process())."""
        frame = sys._current_frames().get(self._loop_thread or -1)
        if frame is None:
            return "  (the main loop's thread is gone)"
        return "".join(traceback.format_stack(frame)).rstrip()

    def take_reply(self) -> tuple[HeartbeatReply, frozenset[str]] | None:
        """The newest reply not yet taken (older ones are superseded: level-triggered),
        with the tasks its heartbeat reported failed: the coordinator saw those."""
        with self._lock:
            reply, self._reply = self._reply, None
            return reply

    def _keep(self, reply: HeartbeatReply, request: HeartbeatRequest) -> None:
        failed = frozenset(t.task for t in request.tasks if t.role == "failed")
        with self._lock:
            self._reply = (reply, failed)
            self._unsettled = True

    def settle(self) -> None:
        """The main loop has acted on the replies it took and published the result:
        the next heartbeat may long-poll again, and one held for this goes out now."""
        with self._lock:
            if self._reply is None:
                self._unsettled = False
                if self._awaiting_settle:
                    self._awaiting_settle = False
                    self._poked.set()

    def _request(self, leaving: bool = False, path: str = "") -> HeartbeatRequest:
        tasks = self.snapshot()
        return HeartbeatRequest(processor_id=self.processor_id, execution_id=self.execution_id,
                                metrics_url=self.metrics_url, tasks=tasks,
                                leaving=leaving, drain=self.drain and not leaving,
                                generation=self.generation,
                                disk_full=self.disk_full(), busy=self.busy,
                                wait_ms=self._wait_ms(tasks) if path == _HEARTBEAT else None)

    def _wait_ms(self, tasks: list[TaskReport]) -> int | None:
        """Close to a handoff and with nothing in flight, ask to be answered as soon as
        the assignment changes (a long poll) instead of polling fast; never while an
        activation runs, or while the main loop acts on a reply (a release): their end
        must be reported at once, not after a long poll that nothing else ends (it
        held a release's report back ~250 ms)."""
        if not self.fast or self._unsettled or any(t.role == "activating" for t in tasks):
            return None
        return int(self.interval_s * 1000)

    def _post(self, path: str, request: HeartbeatRequest) -> HeartbeatReply:
        if path == _REGISTER:
            return self._client.register(request)
        return self._client.heartbeat(request)

    def run(self) -> None:
        grace = Deadline.after(self.clock, self.grace_s)    # re-armed by every good reply
        outage_reported = False
        failures = _Failures(self.clock)
        path = _REGISTER
        while not self.stopping.is_set():
            if self._loop_stuck():
                return
            started = self.clock.monotonic()
            request: HeartbeatRequest | None = None
            try:
                request = self._request(path=path)
                reply = self._post(path, request)
                alive = reply.alive     # the POST's answer: no second request for it
            except (CoordinatorError, OSError, ValueError, TokenError) as exc:
                self.on_heartbeat("unreachable")
                if grace.expired() and not outage_reported:
                    outage_reported = True
                    log.error("coordinator %s unreachable for more than %.1fs "
                              "(coordinator_grace_ms): tasks keep processing, handoffs wait "
                              "for it: %s", self.url, self.grace_s, exc)
                else:
                    failures.log(self.url, exc)
                # the regular interval, pokes or not: a handoff close at hand would
                # otherwise knock every fast interval for as long as the outage lasts
                self.stopping.wait(max(0.0, self.interval_s
                                       - (self.clock.monotonic() - started)))
                continue
            else:
                failures.clear()
                if reply.unknown and path != _REGISTER:
                    log.warning("coordinator %s has no record of processor %s: registering "
                                "execution %s again", self.url, self.processor_id,
                                self.execution_id)
                    path = _REGISTER
                    self.generation = None      # its model may differ: take it whole
                    continue
                self.on_heartbeat("ok" if alive else "rejected")
                if not alive:
                    self._die(f"coordinator says execution {self.execution_id} of processor "
                              f"{self.processor_id} is not alive")
                    return
                if outage_reported:
                    log.info("coordinator %s reachable again", self.url)
                outage_reported = False
                grace.arm(self.grace_s)
                self._heard_at = self.clock.monotonic()
                path = _HEARTBEAT
                self.registered.set()
                self._keep(reply, request)
            # an Event wait, not clock.sleep: poke() and settle() must cut it short
            self._poked.wait(self._next_wait(request, started))
            with self._lock:
                self._awaiting_settle = False
            self._poked.clear()

    def _next_wait(self, request: HeartbeatRequest | None, started: float) -> float:
        """Seconds until the next heartbeat. A long poll that waited was answered with
        news (a release, an activation): the next heartbeat goes out once the main loop
        has acted on it (`settle()`), so that it reports what was done. Sent at once, it
        reported the state before (a release's final T1 not yet in it), and the report
        that mattered waited for that round trip (~30 ms of every handoff)."""
        elapsed = self.clock.monotonic() - started
        interval = min(self.interval_s, _FAST_INTERVAL_S) if self.fast else self.interval_s
        if request is None or not request.wait_ms or elapsed < _FAST_INTERVAL_S:
            return max(0.0, interval - elapsed)
        with self._lock:
            if not self._unsettled:
                return 0.0
            self._awaiting_settle = True    # settle() pokes; at worst a regular beat later
        return self.interval_s

    def poke(self) -> None:
        """Heartbeat now: a release or activation just finished and the coordinator is
        waiting for it (this keeps coordinator round trips out of the handoff pause)."""
        self._poked.set()

    def _die(self, reason: str) -> None:
        self.dead_reason = reason
        log.error("stopping without commit: %s", reason)
        self.dead.set()
        self._poked.set()
        if not self.stopping.wait(_HARD_EXIT_AFTER_S):
            log.error("main loop did not stop in %.0fs; exiting", _HARD_EXIT_AFTER_S)
            os._exit(EXIT_DEAD)

    def leave(self) -> None:
        """Graceful goodbye: one last report (released positions), best effort."""
        self.stopping.set()
        self._poked.set()
        try:
            self._post(_HEARTBEAT, self._request(leaving=True))
        except (CoordinatorError, OSError, ValueError, TokenError) as exc:
            log.warning("final heartbeat failed: %s", exc)


class _Failures:
    """Failed heartbeats of one outage: the first is logged, then one line at most every
    _FAILURE_LOG_EVERY_S with how many failed since (a handoff's fast beats and a long
    outage would otherwise write a line a beat)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.unlogged = 0
        self.logged_at: float | None = None

    def log(self, url: str, exc: Exception) -> None:
        now = self.clock.monotonic()
        if self.logged_at is not None and now - self.logged_at < _FAILURE_LOG_EVERY_S:
            self.unlogged += 1
            return
        more = f" ({self.unlogged} more failed since the last line)" if self.unlogged else ""
        log.warning("heartbeat to %s failed%s: %s", url, more, exc)
        self.logged_at, self.unlogged = now, 0

    def clear(self) -> None:
        self.logged_at, self.unlogged = None, 0
