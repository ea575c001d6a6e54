"""How many processors a job needs: the autoscaling recommendation (pure).

Rules and theory of operation
=============================

The coordinator feeds a `Sample` about once a second, made of what it already knows:
each processor's records/s on its active tasks and how busy its main loop was (the
share of wall time it did not wait for records), the sum of the inputs' end offsets
(whose growth is the input rate), the job's total lag in records, its task count, and
how long a scale-out's warmups would take (the state size over the measured catch-up
rate). `Recommender.recommend()` answers with a `Recommendation`: a processor count,
why, and the estimates behind it.

1. **Capacity.** A processor that handled `rate` records/s while busy a share `busy`
   of the time could handle `rate / busy` (after DS2's "true processing rate"). The
   job's capacity per processor is the median of that over the busy processors
   (`busy >= MIN_BUSY_FOR_CAPACITY`: an idle loop's ratio is noise) and the recent
   samples.
2. **Demand.** The input rate over the last `RATE_WINDOW_S`, plus what burns the lag
   within `max_lag_s`. A scale-out is not instant: while its warmups run (`warmup_s`)
   the lag grows by what the current processors cannot keep up with, so that is burnt
   too (Flink's autoscaler counts its restart time the same way).
3. **Count.** `ceil(demand / (capacity × target_utilization))`, within
   `[min_processors, max_processors]` (max 0: the task count). Without a capacity
   estimate (every processor nearly idle) it is the busy share the job uses at the
   target utilization, `ceil(Σ busy / target)`, which only ever lowers the count.
4. **Stabilization.** Up: every sample of the last `up_window_s` needs more than the
   current count (a spike does not scale), and the count recommended is the latest
   sample's: the window's earlier ones were sized on an input rate still climbing (it
   is measured over `RATE_WINDOW_S`) and on a lag still piling up, and a scale-out to
   their count would need a second one at once (one step in the load, one decision).
   Down: every sample of the last `down_window_s` needs fewer, and the count
   is the largest of them (Kubernetes' HPA does the same), so a scale-down never goes
   below what the window's peak needed: it does not need an immediate scale-up. The
   peak is that of the window's own input: the samples of its first `RATE_WINDOW_S`
   measure input from before it (a load just stepped down would be scaled in twice,
   first to what the rate still climbing down from the step needed).
5. **Budget.** A *decision* is the recommendation leaving the current count, up or
   down, from a count it has not left in that direction before (a recommendation that
   keeps rising while a scale-out is being made, or that wavers before it is acted
   on, is the same decision). At most `max_decisions_per_hour` in any hour; past that
   it holds and says so.
6. **Past the tasks.** A job cannot use more processors than it has tasks. When the
   demand needs more, the count is the task count, and the recommendation says
   `expand` (grow the inputs and split the tasks) when `allow_expand` is set and the
   tasks can split (`cannot_split` says why not: a changelog catch-up source), or that
   it is needed but not allowed, or not possible.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import median

__all__ = [
    "MIN_BUSY_FOR_CAPACITY", "RATE_WINDOW_S", "AutoscalePolicy", "Load", "Recommendation",
    "Recommender", "Sample",
]

# below this busy share a processor's rate / busy says little about its capacity
MIN_BUSY_FOR_CAPACITY = 0.2
# the input rate is the end offsets' growth over this long
RATE_WINDOW_S = 10.0
# no count needs to be larger than this (it is bounded by the tasks after)
_MOST = 1_000_000.0
_HOUR_S = 3600.0


@dataclass(frozen=True)
class AutoscalePolicy:
    """`[autoscale]` in seconds and counts (orchestrator/wire/config.py documents each)."""

    min_processors: int = 1
    max_processors: int = 0             # 0: the task count
    target_utilization: float = 0.7
    max_lag_s: float = 30.0
    allow_expand: bool = False
    up_window_s: float = 15.0
    down_window_s: float = 300.0
    max_decisions_per_hour: int = 6
    cannot_split: str = ""              # why the job's tasks cannot split ("": they can)


@dataclass(frozen=True)
class Load:
    """One processor's load: records/s on its active tasks, and its busy share (0-1)."""

    rate: float
    busy: float


@dataclass(frozen=True)
class Sample:
    """What the coordinator knows at `at` (monotonic seconds)."""

    at: float
    loads: Mapping[str, Load]           # the live processors not draining
    input_end: int                      # Σ of the inputs' end offsets
    lag: int                            # Σ of the tasks' lag (records)
    tasks: int
    warmup_s: float = 0.0               # a scale-out's catch-up time, as estimated


@dataclass(frozen=True)
class Recommendation:
    """A processor count, why, and what it was computed from (for status and metrics)."""

    processors: int
    current: int
    reason: str
    capacity_per_processor: float | None    # records/s at full busy
    demand: float | None                    # records/s to serve input and burn the lag
    input_rate: float | None
    lag: int
    expand: bool = False                    # more than the task count is needed
    inputs: dict[str, float] = field(default_factory=dict)

    @property
    def direction(self) -> str:
        """`up`, `down` or `hold`."""
        if self.processors > self.current:
            return "up"
        return "down" if self.processors < self.current else "hold"


class Recommender:
    """The samples of the last `down_window_s` and the recommendation's history."""

    def __init__(self, policy: AutoscalePolicy) -> None:
        self.policy = policy
        self._samples: deque[Sample] = deque()
        self._needs: deque[tuple[float, int]] = deque()    # (at, unstabilised count)
        self._decisions: deque[float] = deque()
        self._episode: tuple[bool, int] | None = None   # (up, the count it left)

    def observe(self, sample: Sample) -> None:
        keep = max(self.policy.down_window_s, RATE_WINDOW_S, self.policy.up_window_s)
        self._samples.append(sample)
        while self._samples and self._samples[0].at < sample.at - keep - RATE_WINDOW_S:
            self._samples.popleft()
        self._needs.append((sample.at, self._need(sample)[0]))
        while self._needs and self._needs[0][0] < sample.at - keep:
            self._needs.popleft()

    def recommend(self) -> Recommendation | None:
        """None before the first sample."""
        if not self._samples:
            return None
        now = self._samples[-1]
        _, capacity, demand, rate = self._need(now)
        current = len(now.loads)
        wanted, reason = self._stabilised(now.at, current)
        count = max(self.policy.min_processors, min(wanted, self._ceiling(now)))
        count, reason = self._budgeted(now.at, count, current, reason)
        expand = wanted > now.tasks
        can_expand = self.policy.allow_expand and not self.policy.cannot_split
        if expand:
            reason += (f"; the demand needs {wanted} processors but the job has {now.tasks} "
                       "tasks: " + ("expand the inputs and split the tasks" if can_expand
                                    else "expanding is not allowed ([autoscale] allow_expand)"
                                    if not self.policy.allow_expand else
                                    f"expanding is not possible: {self.policy.cannot_split}"))
        return Recommendation(
            processors=count, current=current,
            reason=reason, capacity_per_processor=capacity, demand=demand, input_rate=rate,
            lag=now.lag, expand=expand and can_expand,
            inputs={"busy": round(sum(x.busy for x in now.loads.values()), 3),
                    "records_per_s": round(sum(x.rate for x in now.loads.values()), 1),
                    "warmup_s": round(now.warmup_s, 1), "tasks": now.tasks})

    # ---- the rules ----------------------------------------------------------------------

    def _need(self, now: Sample) -> tuple[int, float | None, float | None, float | None]:
        """(count, capacity per processor, demand, input rate) of one sample, unbounded
        by the stabilization."""
        rate = self._input_rate(now)
        capacity = self._capacity(now.at)
        p = self.policy
        if capacity is None or rate is None:
            busy = sum(x.busy for x in now.loads.values())
            count = max(1, math.ceil(busy / p.target_utilization - 1e-9))
            return min(count, max(1, len(now.loads))), capacity, None, rate
        serving = capacity * len(now.loads)
        behind = max(0.0, rate - serving) * now.warmup_s
        demand = rate + (now.lag + behind) / p.max_lag_s
        ratio = demand / (capacity * p.target_utilization)
        count = max(1, math.ceil(min(ratio, _MOST) - 1e-9))
        return count, capacity, demand, rate

    def _ceiling(self, now: Sample) -> int:
        top = self.policy.max_processors or now.tasks
        return max(1, min(top, now.tasks))

    def _input_rate(self, now: Sample) -> float | None:
        first = next((s for s in self._samples if s.at >= now.at - RATE_WINDOW_S), None)
        if first is None or now.at - first.at < RATE_WINDOW_S / 2:
            return None
        return max(0.0, (now.input_end - first.input_end) / (now.at - first.at))

    def _capacity(self, since: float) -> float | None:
        estimates = [x.rate / x.busy for s in self._samples if s.at >= since - RATE_WINDOW_S
                     for x in s.loads.values()
                     if x.busy >= MIN_BUSY_FOR_CAPACITY and x.rate >= 1.0]
        # (a busy processor with no active records is replaying: it says nothing of
        # what it would serve)
        return median(estimates) if estimates else None

    def _stabilised(self, now: float, current: int) -> tuple[int, str]:
        p = self.policy
        up = [n for at, n in self._needs if at >= now - p.up_window_s]
        down = [n for at, n in self._needs if at >= now - p.down_window_s]
        if self._covers(now, p.up_window_s) and min(up) > current:
            return up[-1], f"every estimate of the last {p.up_window_s:.0f} s needs more"
        if self._covers(now, p.down_window_s) and max(down) < current:
            # the window's own input: a sample's rate reaches RATE_WINDOW_S before it
            inside = [n for at, n in self._needs
                      if at >= now - p.down_window_s + RATE_WINDOW_S] or down[-1:]
            return max(inside), (f"every estimate of the last {p.down_window_s:.0f} s "
                                 "needs fewer (the window's peak kept)")
        return current, "the current count serves the demand at the target utilization"

    def _covers(self, now: float, window: float) -> bool:
        return bool(self._needs) and self._needs[0][0] <= now - window + 1.0

    def _budgeted(self, now: float, count: int, current: int, reason: str) -> tuple[int, str]:
        while self._decisions and self._decisions[0] < now - _HOUR_S:
            self._decisions.popleft()
        if count == current:
            return count, reason
        episode = (count > current, current)
        if episode != self._episode:
            if len(self._decisions) >= self.policy.max_decisions_per_hour:
                return current, (f"held: {len(self._decisions)} decisions in the last hour "
                                 "([autoscale] max_decisions_per_hour)")
            self._decisions.append(now)
            self._episode = episode
        return count, reason
