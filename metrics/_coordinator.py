"""The coordinator's metrics: handoffs, liveness, the job model, and a scrape-time view.

Two kinds of instruments live here:

- Event instruments (counters, histograms, a few gauges) that the coordinator updates
  when something happens: a handoff leaves a phase or ends, an invalid execution
  heartbeats, the job model moves to a new generation, an input topic grows.
- A custom `Collector` for everything that is *state*: lag per task and replica,
  catch-up remaining records, rate and ETA, handoffs in flight per phase and how long
  the oldest has been in its phase. It calls the coordinator's view callbacks at
  scrape time, so those numbers are never stale and never drift (nothing to
  increment and decrement, nothing to fix after a coordinator restart resumes its
  handoffs from the coordinator stream).

The view callbacks run on the scraping thread (the metrics HTTP server, or the
coordinator's own /metrics route): they must return a snapshot as plain data, fast,
without blocking on I/O. A callback that raises costs only its own families for that
scrape; it is logged and counted in `baton_coordinator_view_errors_total`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from metrics._vocab import (
    AUTOSCALE_DIRECTIONS,
    AUTOSCALE_OUTCOMES,
    CATCH_UP_ROLES,
    HANDOFF_OUTCOMES,
    HANDOFF_PHASES,
    PAUSE_BUCKETS,
    PHASE_BUCKETS,
    PROCESSOR_STATES,
    AutoscaleDirection,
    AutoscaleOutcome,
    HandoffOutcome,
    HandoffPhase,
    ProcessorState,
    check_label,
)

__all__ = [
    "COORDINATOR_METRIC_NAMES",
    "CoordinatorMetrics",
    "HandoffSample",
    "HandoffView",
    "LagSample",
    "LagView",
]

log = logging.getLogger("baton.metrics")

# Phases a handoff can report that are not "in flight": they are skipped, not errors.
_TERMINAL_PHASES = frozenset({"done", "cancelled"})


@dataclass(frozen=True, slots=True)
class LagSample:
    """One replica of one task as the coordinator sees it.

    Attributes:
        task: the task name.
        processor: the processor id holding the replica.
        role: `active`, `warmup` or `standby` (any wire role is accepted; only
            `warmup` counts as catching up).
        lag: records, T1 - T2 summed over S1 (for the active: what the coordinator
            knows of its input lag); None when unknown (no series is exported).
        rate_records_per_s: the replica's recent replay (or processing) rate.
    """

    task: str
    processor: str
    role: str
    lag: int | None
    rate_records_per_s: float = 0.0


@dataclass(frozen=True, slots=True)
class HandoffSample:
    """One handoff in flight: its task, its phase, and seconds spent in that phase."""

    task: str
    phase: str
    seconds_in_phase: float


LagView = Callable[[], Iterable[LagSample]]
HandoffView = Callable[[], Iterable[HandoffSample]]

# Every family this module exports, as PromQL names it (counters with `_total`).
COORDINATOR_METRIC_NAMES: tuple[str, ...] = (
    "baton_task_lag_records",
    "baton_catchup_remaining_records",
    "baton_catchup_eta_seconds",
    "baton_catchup_rate_records_per_second",
    "baton_catchup_acceptable_lag_records",
    "baton_handoff_phase_seconds",
    "baton_handoff_pause_seconds",
    "baton_handoffs_total",
    "baton_handoffs_in_flight",
    "baton_handoff_phase_age_seconds",
    "baton_invalid_heartbeats_total",
    "baton_processors",
    "baton_tasks_failed",
    "baton_job_model_generation",
    "baton_partition_expansions_total",
    "baton_coordinator_view_errors_total",
    "baton_coordinator_leader",
    "baton_recommended_processors",
    "baton_autoscale_capacity_records_per_second",
    "baton_autoscale_demand_records_per_second",
    "baton_autoscale_input_records_per_second",
    "baton_autoscale_decisions_total",
)


def _no_samples() -> list[LagSample]:
    return []


def _no_handoffs() -> list[HandoffSample]:
    return []


class CoordinatorMetrics:
    """The coordinator's instruments, registered on `registry` with `job` as a label.

    Args:
        registry: where to register (never the global REGISTRY).
        job: the job name (`job.name`), the `job` label of every series.
        acceptable_lag: `catch_up.acceptable_lag`; remaining records are lag above it.
        lag_view: returns the current lag of every replica (see `set_views`).
        handoff_view: returns the handoffs in flight (see `set_views`).

    Raises:
        ValueError: a family is already registered on `registry` (one
            CoordinatorMetrics per registry).
    """

    def __init__(self, registry: CollectorRegistry, job: str, *, acceptable_lag: int = 0,
                 lag_view: LagView | None = None,
                 handoff_view: HandoffView | None = None) -> None:
        self.job = job
        self._phase = Histogram(
            "baton_handoff_phase_seconds", "Time a handoff spent in a phase, observed "
            "when it leaves the phase.", ["job", "phase"], registry=registry,
            buckets=PHASE_BUCKETS)
        self._pause = Histogram(
            "baton_handoff_pause_seconds", "Handoff pause: last output of the old owner "
            "to first output of the new owner on the moved partitions.", ["job"],
            registry=registry, buckets=PAUSE_BUCKETS).labels(job=job)
        self._handoffs = Counter(
            "baton_handoffs_total", "Handoffs ended, by outcome.", ["job", "outcome"],
            registry=registry)
        self._invalid = Counter(
            "baton_invalid_heartbeats_total", "Heartbeats from executions that are no "
            "longer valid (answered alive: false).", ["job"], registry=registry
        ).labels(job=job)
        self._processors = Gauge(
            "baton_processors", "Processors known to the coordinator, by state.",
            ["job", "state"], registry=registry)
        self._failed = Gauge(
            "baton_tasks_failed", "Tasks that failed and run on no processor now "
            "(waiting out a retry backoff, or failed on every processor).", ["job"],
            registry=registry).labels(job=job)
        self._generation = Gauge(
            "baton_job_model_generation", "Generation of the job model (assignment).",
            ["job"], registry=registry).labels(job=job)
        self._expansions = Counter(
            "baton_partition_expansions_total", "Input partition expansions recorded.",
            ["job", "topic"], registry=registry)
        Gauge("baton_catchup_acceptable_lag_records", "catch_up.acceptable_lag: a replica "
              "with at most this lag is caught up.", ["job"], registry=registry
              ).labels(job=job).set(acceptable_lag)
        self._leader = Gauge(
            "baton_coordinator_leader", "1 while this coordinator leads its job, 0 while it "
            "is a standby.", ["job"], registry=registry).labels(job=job)
        self._recommended = Gauge(
            "baton_recommended_processors", "The processor count the job needs, as the "
            "autoscaling recommendation estimates it (docs/operations.md, \"Autoscaling\").",
            ["job"], registry=registry).labels(job=job)
        self._recommended.set(0)
        self._estimates = {name: Gauge(
            f"baton_autoscale_{name}_records_per_second", text, ["job"], registry=registry
        ).labels(job=job) for name, text in (
            ("capacity", "What one processor serves at full busy, as estimated."),
            ("demand", "What the job must serve: its input rate and its lag burnt within "
                       "[autoscale] max_lag_s."),
            ("input", "The inputs' rate, from their end offsets."))}
        for gauge in self._estimates.values():
            gauge.set(float("nan"))            # not estimated yet
        self._decisions = Counter(
            "baton_autoscale_decisions_total", "Decisions `baton autoscale` reported, by "
            "direction (up, down, expand) and outcome (started, then done or failed).",
            ["job", "direction", "outcome"], registry=registry)
        errors = Counter(
            "baton_coordinator_view_errors_total", "Scrapes where a coordinator view "
            "callback raised (its families were left out).", ["job"], registry=registry
        ).labels(job=job)
        # a standby exports none of the job's picture (`set_leader`)
        self._leading = True
        self._collector = _CoordinatorViewCollector(job, acceptable_lag, errors)
        self.set_views(lag_view=lag_view or _no_samples,
                       handoff_view=handoff_view or _no_handoffs)
        registry.register(self._collector)
        self._init_children()

    def _init_children(self) -> None:
        # Zero series for every known label value, so rate() and alerts see a 0, not nothing.
        for phase in HANDOFF_PHASES:
            self._phase.labels(job=self.job, phase=phase)
        for outcome in HANDOFF_OUTCOMES:
            self._handoffs.labels(job=self.job, outcome=outcome)
        for state in PROCESSOR_STATES:
            self._processors.labels(job=self.job, state=state).set(0)
        for direction in AUTOSCALE_DIRECTIONS:
            for result in AUTOSCALE_OUTCOMES:
                self._decisions.labels(job=self.job, direction=direction, outcome=result)

    def set_views(self, *, lag_view: LagView | None = None,
                  handoff_view: HandoffView | None = None) -> None:
        """Bind the scrape-time callbacks (those passed; the others are kept).

        Args:
            lag_view: returns one `LagSample` per (task, processor) replica. It runs
                on the scraping thread: return a snapshot, do not block.
            handoff_view: returns one `HandoffSample` per handoff in flight.
        """
        if lag_view is not None:
            self._collector.lag_view = lag_view
        if handoff_view is not None:
            self._collector.handoff_view = handoff_view

    def record_phase(self, phase: HandoffPhase, seconds: float) -> None:
        """A handoff left `phase` after `seconds` in it (call on every transition)."""
        check_label(phase, HANDOFF_PHASES, "phase")
        self._phase.labels(job=self.job, phase=phase).observe(seconds)

    def record_handoff(self, outcome: HandoffOutcome,
                       pause_seconds: float | None = None) -> None:
        """A handoff ended with `outcome`; `pause_seconds` when outputs moved owner."""
        check_label(outcome, HANDOFF_OUTCOMES, "outcome")
        self._handoffs.labels(job=self.job, outcome=outcome).inc()
        if pause_seconds is not None:
            self._pause.observe(pause_seconds)

    def record_pause(self, seconds: float) -> None:
        """A finished handoff's pause, observed when the new owner reports it."""
        self._pause.observe(seconds)

    def record_invalid_heartbeat(self) -> None:
        """A heartbeat came from an execution that is not the processor's valid one."""
        self._invalid.inc()

    def record_expansion(self, topic: str) -> None:
        """An expansion of input `topic` was recorded in the coordinator stream."""
        self._expansions.labels(job=self.job, topic=topic).inc()

    def set_processors(self, counts: Mapping[ProcessorState, int]) -> None:
        """Set the processor count per state; states missing from `counts` become 0.
        Ignored on a standby (a deposed leadership's last decisions included)."""
        for state in counts:
            check_label(state, PROCESSOR_STATES, "state")
        if not self._leading:
            return
        for state in PROCESSOR_STATES:
            self._processors.labels(job=self.job, state=state).set(counts.get(state, 0))

    def set_failed_tasks(self, count: int) -> None:
        """Tasks that failed and run nowhere now (ignored on a standby)."""
        if self._leading:
            self._failed.set(count)

    def set_recommendation(self, processors: int, capacity: float | None,
                           demand: float | None, input_rate: float | None) -> None:
        """The autoscaling recommendation and its estimates (NaN: not estimated yet);
        the leader's only (a standby exports 0 and NaN)."""
        if not self._leading:
            return
        self._recommended.set(processors)
        for name, value in (("capacity", capacity), ("demand", demand),
                            ("input", input_rate)):
            self._estimates[name].set(float("nan") if value is None else value)

    def record_autoscale_decision(self, direction: AutoscaleDirection,
                                  outcome: AutoscaleOutcome) -> None:
        """`baton autoscale` reported a decision (POST /autoscale/decisions)."""
        check_label(direction, AUTOSCALE_DIRECTIONS, "direction")
        check_label(outcome, AUTOSCALE_OUTCOMES, "outcome")
        self._decisions.labels(job=self.job, direction=direction, outcome=outcome).inc()

    def set_leader(self, leading: bool) -> None:
        """This coordinator became the leader (True) or a standby (False).

        A standby exports none of the job's picture: its processors and failed tasks go
        to 0 and its lag and handoff views empty, so a sum over every coordinator of a
        job (dashboards, alerts) counts only the leader's, and an alert a deposed
        leader's last picture held open clears."""
        self._leading = leading
        self._leader.set(1 if leading else 0)
        if not leading:
            self.set_views(lag_view=_no_samples, handoff_view=_no_handoffs)
            for state in PROCESSOR_STATES:
                self._processors.labels(job=self.job, state=state).set(0)
            self._failed.set(0)
            self._recommended.set(0)
            for gauge in self._estimates.values():
                gauge.set(float("nan"))

    def set_generation(self, generation: int) -> None:
        """The job model (assignment) moved to `generation`."""
        self._generation.set(generation)


class _CoordinatorViewCollector(Collector):
    """Lag, catch-up and in-flight handoff gauges, computed from the views at scrape time."""

    def __init__(self, job: str, acceptable_lag: int, errors: Counter) -> None:
        self.job = job
        self.acceptable_lag = acceptable_lag
        self.errors = errors
        self.lag_view: LagView = _no_samples
        self.handoff_view: HandoffView = _no_handoffs

    def describe(self) -> Iterable[Metric]:
        # Names only, so the registry refuses a second CoordinatorMetrics on it.
        return [*_lag_families(), *_handoff_families()]

    def collect(self) -> Iterable[Metric]:
        yield from self._guarded("lag_view", self._collect_lags)
        yield from self._guarded("handoff_view", self._collect_handoffs)

    def _guarded(self, what: str, build: Callable[[], list[Metric]]) -> Iterator[Metric]:
        try:
            families = build()
        except Exception:  # a broken view must not fail the whole scrape
            log.exception("metrics: the coordinator's %s callback failed; its families "
                          "are left out of this scrape", what)
            self.errors.inc()
            return
        yield from families

    def _collect_lags(self) -> list[Metric]:
        lag, remaining, eta, rate = _lag_families()
        replicas = {(s.task, s.processor, s.role): s for s in self.lag_view()}
        for (task, processor, role), sample in sorted(replicas.items()):
            if sample.lag is not None:
                lag.add_metric([self.job, task, processor, role], sample.lag)
            if role not in CATCH_UP_ROLES:
                continue
            labels = [self.job, task, processor]
            rate_known = math.isfinite(sample.rate_records_per_s)
            if rate_known:
                rate.add_metric(labels, sample.rate_records_per_s)
            if sample.lag is None:
                continue
            left = max(0, sample.lag - self.acceptable_lag)
            remaining.add_metric(labels, left)
            if left == 0:
                eta.add_metric(labels, 0.0)
            elif rate_known and sample.rate_records_per_s > 0:
                eta.add_metric(labels, left / sample.rate_records_per_s)
        return [lag, remaining, eta, rate]

    def _collect_handoffs(self) -> list[Metric]:
        count, age = _handoff_families()
        in_flight: dict[str, int] = {phase: 0 for phase in HANDOFF_PHASES}
        oldest: dict[str, float] = {}
        for sample in self.handoff_view():
            if sample.phase in _TERMINAL_PHASES:
                continue
            phase = check_label(sample.phase, HANDOFF_PHASES, "phase")
            in_flight[phase] += 1
            oldest[phase] = max(oldest.get(phase, 0.0), sample.seconds_in_phase)
        for phase in HANDOFF_PHASES:
            count.add_metric([self.job, phase], in_flight[phase])
            if phase in oldest:
                age.add_metric([self.job, phase], oldest[phase])
        return [count, age]


def _lag_families() -> tuple[GaugeMetricFamily, ...]:
    replica = ["job", "task", "processor"]
    return (
        GaugeMetricFamily("baton_task_lag_records", "Lag of a task replica in records "
                          "(T1 - T2 summed over the task's partitions).",
                          labels=[*replica, "role"]),
        GaugeMetricFamily("baton_catchup_remaining_records", "Records a warmup still has "
                          "to replay before its handoff can start (lag - acceptable_lag).",
                          labels=replica),
        GaugeMetricFamily("baton_catchup_eta_seconds", "Estimated seconds until a warmup "
                          "is caught up (remaining / rate; absent while the rate is 0).",
                          labels=replica),
        GaugeMetricFamily("baton_catchup_rate_records_per_second", "A warmup's recent "
                          "replay rate as reported with its heartbeats.", labels=replica),
    )


def _handoff_families() -> tuple[GaugeMetricFamily, ...]:
    return (
        GaugeMetricFamily("baton_handoffs_in_flight", "Handoffs currently in a phase.",
                          labels=["job", "phase"]),
        GaugeMetricFamily("baton_handoff_phase_age_seconds", "Seconds the oldest handoff "
                          "in a phase has been in it (absent when none is).",
                          labels=["job", "phase"]),
    )
