"""What the coordinator daemon's loop does with the core: decide, and copy its views.

Decisions (liveness, handoffs, placement) run in `Decisions.tick()` on the daemon's
loop, which the guarded core's `wake` rouses when a report carries news a decision
waits for; heartbeats never decide (orchestrator/daemon/heartbeats.py).
"""

from __future__ import annotations

import math
import time
from typing import Any

from orchestrator.core import views
from orchestrator.core.autoscale import Recommendation, Recommender
from orchestrator.core.coordinator import Coordinator
from orchestrator.daemon.gate import Lease
from orchestrator.daemon.guarded_core import GuardedCore

__all__ = ["Decisions", "MetricViews"]

# processors whose lag samples MetricViews.refresh copies per hold of the core's lock
_VIEW_CHUNK = 50


class Decisions:
    """Runs the core's decisions for the daemon's loop, persisted before anyone is told.

    Args:
        guard: the core behind its lock.
    """

    def __init__(self, guard: GuardedCore) -> None:
        self._guard = guard
        # whether the lease holds, i.e. processors can be heard (set by the leader)
        self.lease: Lease | None = None
        self._excused_to = -math.inf        # the last lapse excused

    def tick(self) -> None:
        """Decide (the daemon's loop), persist, then answer the waiting heartbeats."""
        guard, core = self._guard, self._guard.core
        with guard.lock:
            guard.take_inbox()
            self._excuse_lapse(core)
            placed = core.tick()
            guard.count_decision()
            if placed or guard.unpersisted:
                try:
                    guard.commit()
                finally:
                    guard.replies.publish()
            else:   # nothing changed: no records to diff, the replies in force stay so
                guard.notify()

    def _excuse_lapse(self, core: Coordinator) -> None:
        """Heartbeats get 503 while the lease lapses (a broker away or stalled): no
        processor's silence counts against it until then, nor does the time a release
        or an activation waited for an acknowledgement. Till now, if it lapses now;
        else till the last time the gate found it lapsed, which this loop never sees
        when it waited on the late stream write itself (a tick's commit, 15 s in a broker
        stall: every processor was then declared lost at the next tick)."""
        lease = self.lease
        if lease is None:
            return
        if not lease():
            until = core.picture.clock.monotonic()
        elif lease.lapsed_at > self._excused_to:
            until = lease.lapsed_at
        else:
            return
        core.picture.processors.excuse(until)
        core.picture.handoff_book.excuse(until)        # nor does a release or activation wait on it
        self._excused_to = lease.lapsed_at


class MetricViews:
    """Copies what /metrics shows of the core, so a scrape never waits on the lock.

    Args:
        guard: the core behind its lock (its metrics, if any, read these copies).
    """

    def __init__(self, guard: GuardedCore) -> None:
        self._guard = guard
        self._views: tuple[list[Any], list[Any]] = ([], [])
        # the autoscaling recommendation, fed a sample per refresh (about a second)
        self._recommender = Recommender(guard.core.picture.config.autoscale)
        self.recommendation: Recommendation | None = None
        metrics = guard.core.picture.metrics
        if metrics is not None:
            metrics.set_views(lag_view=lambda: self._views[0],
                              handoff_view=lambda: self._views[1])

    def refresh(self) -> None:
        """Copy the samples a few processors per hold of the lock, because a large
        job's samples taken at once would hold it long enough to delay every heartbeat."""
        guard = self._guard
        with guard.lock:
            live = list(guard.core.picture.processors.live())
            handoffs = guard.core.picture.handoff_samples()
        lags: list[Any] = []
        for start in range(0, len(live), _VIEW_CHUNK):
            time.sleep(0)   # hand the GIL over: the event loop answering heartbeats waits
            with guard.lock:
                lags += guard.core.picture.lag_samples(p for p in live[start:start + _VIEW_CHUNK]
                                               if p.valid)
        self._views = (lags, handoffs)
        with guard.lock:
            sample = views.autoscale_sample(guard.core.picture)
        self._recommender.observe(sample)
        found = self.recommendation = self._recommender.recommend()
        metrics = guard.core.picture.metrics
        if found is not None and metrics is not None:
            metrics.set_recommendation(found.processors, found.capacity_per_processor,
                                       found.demand, found.input_rate)
