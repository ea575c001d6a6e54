"""A processor's metrics: throughput, catch-up, transactions, its share of handoffs, store size.

Every series carries `job` and `processor` (the stable id, never the execution id,
which changes per incarnation). Counters per task are created when a task first
counts something and removed by `forget_task` when the processor drops the task, so
the series count follows the tasks the processor holds, not its history.

Store sizes are read at scrape time from a callback (task -> bytes) that must return
a snapshot without blocking on RocksDB compaction or I/O: pass sizes the runtime
already tracks (for example refreshed on commit). A callback that raises is logged
and counted in `baton_store_view_errors_total`; the rest of the scrape is served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from metrics._job import JobMetricSet
from metrics._vocab import (
    CATCH_UP_PATHS,
    CATCH_UP_SOURCES,
    HEARTBEAT_OUTCOMES,
    PROCESS_ERROR_OUTCOMES,
    PROCESSOR_STEPS,
    SPARK_BUCKETS,
    STALL_ROLES,
    STEP_BUCKETS,
    TRANSACTION_OUTCOMES,
    CatchUpPath,
    CatchUpSource,
    HeartbeatOutcome,
    ProcessErrorOutcome,
    ProcessorStep,
    TransactionOutcome,
    check_label,
)

__all__ = ["PROCESSOR_METRIC_NAMES", "NullProcessorMetrics", "ProcessorMetrics", "StoreView"]

log = logging.getLogger("baton.metrics")

StoreView = Callable[[], Mapping[str, int]]

# Every family this module exports, as PromQL names it (counters with `_total`).
PROCESSOR_METRIC_NAMES: tuple[str, ...] = (
    "baton_records_processed_total",
    "baton_catchup_records_total",
    "baton_transactions_total",
    "baton_store_bytes",
    "baton_store_block_cache_bytes",
    "baton_store_memtable_bytes",
    "baton_processor_handoff_seconds",
    "baton_spark_session_start_seconds",
    "baton_bulk_catchup_seconds",
    "baton_bulk_fallbacks_total",
    "baton_catchup_gap_errors_total",
    "baton_misrouted_records_total",
    "baton_heartbeats_total",
    "baton_process_errors_total",
    "baton_store_view_errors_total",
    "baton_consumer_replacements_total",
    "baton_task_stalls_total",
    "baton_effect_errors_total",
)


def _no_stores() -> dict[str, int]:
    return {}


class ProcessorMetrics:
    """One processor's instruments, registered on `registry`.

    Args:
        registry: where to register (never the global REGISTRY).
        job: the job name, the `job` label of every series.
        processor: the processor id, the `processor` label of every series.
        store_view: returns task -> store size in bytes (see `set_store_view`).

    Raises:
        ValueError: a family is already registered on `registry` (one
            ProcessorMetrics per registry).
    """

    def __init__(self, registry: CollectorRegistry, job: str, processor: str, *,
                 store_view: StoreView | None = None) -> None:
        self.job = job
        self.processor = processor
        base = ["job", "processor"]
        self._processed = Counter(
            "baton_records_processed_total", "Input records processed with output by "
            "active tasks.", [*base, "task"], registry=registry)
        self._catch_up = Counter(
            "baton_catchup_records_total", "Records applied to a task's store without "
            "output (warmup, standby, activation replay), by path (consumer | spark) and "
            "source (input: replayed through process(); changelog: applied as they are).",
            [*base, "task", "path", "source"], registry=registry)
        self._transactions = Counter(
            "baton_transactions_total", "Kafka transactions of active tasks, by outcome.",
            [*base, "task", "outcome"], registry=registry)
        self._steps = Histogram(
            "baton_processor_handoff_seconds", "This processor's share of a handoff: "
            "releasing (release seen -> final commit acknowledged), activating (activate "
            "seen -> first committed output), and the steps of activating: fence, t1, "
            "replay, first_read, first_commit.", [*base, "phase"], registry=registry,
            buckets=STEP_BUCKETS)
        self._spark_start = Histogram(
            "baton_spark_session_start_seconds", "Time to obtain a SparkSession for bulk "
            "catch-up.", base, registry=registry, buckets=SPARK_BUCKETS
        ).labels(job=job, processor=processor)
        self._bulk = Histogram(
            "baton_bulk_catchup_seconds", "Duration of a Spark bulk catch-up run (read, "
            "fold, write SST, ingest).", base, registry=registry, buckets=SPARK_BUCKETS
        ).labels(job=job, processor=processor)
        self._fallbacks = Counter(
            "baton_bulk_fallbacks_total", "Spark bulk catch-ups that failed and fell back "
            "to the consumer path.", [*base, "task"], registry=registry)
        # kept when the task is dropped (not in forget_task): the operator must act, and
        # the alert reads it until the processor restarts with the fix
        self._gaps = Counter(
            "baton_catchup_gap_errors_total", "Replays from the input refused because the "
            "broker no longer holds records the task's state includes (retention or "
            "DeleteRecords moved the partition's start past the replay's start): the task "
            "failed; switch to catch_up.source = \"changelog\".", [*base, "task"],
            registry=registry)
        self._heartbeats = Counter(
            "baton_heartbeats_total", "Heartbeats sent to the coordinator, by outcome.",
            [*base, "outcome"], registry=registry)
        self._errors = Counter(
            "baton_process_errors_total", "Records whose process() raised, by what "
            "processor.on_error did (fail | skip | dlq).", [*base, "task", "outcome"],
            registry=registry)
        self._misrouted = Counter(
            "baton_misrouted_records_total", "Records that reached a parent partition past "
            "its expansion barrier with a key of a child partition (a producer staler than "
            "[job] expansion_grace_ms): forwarded to the child, never applied in place.",
            [*base, "task"], registry=registry)
        self._replacements = Counter(
            "baton_consumer_replacements_total", "Consumers (active, replay, activation) "
            "replaced after reaching no broker for 30 s while the processor's other clients "
            "did (processor/runtime/cut_off.py).", base,
            registry=registry).labels(job=job, processor=processor)
        # kept when the task is dropped (not in forget_task): a stall is a fault to look
        # into even once recovered, and the alert reads its increase
        self._stalls = Counter(
            "baton_task_stalls_total", "Reads of a task's partition found stalled: the "
            "partition's end moved and the read stood still for processor.stall_timeout_ms; "
            "each was recovered with a new consumer.", [*base, "task", "role"],
            registry=registry)
        self._effect_errors = Counter(
            "baton_effect_errors_total", "Functions a job handed to context.after_commit() "
            "that raised when run after their transaction committed (not retried).",
            [*base, "task"], registry=registry)
        # the job's own metrics (context.metrics), on this registry with these labels
        self.job_metrics = JobMetricSet(registry, job, processor)
        view_errors = Counter(
            "baton_store_view_errors_total", "Scrapes where a store callback (sizes, memory) "
            "raised.",
            base, registry=registry).labels(job=job, processor=processor)
        self._collector = _StoreCollector(job, processor, view_errors)
        self.set_store_view(store_view or _no_stores)
        registry.register(self._collector)
        self._init_children()

    def _init_children(self) -> None:
        # Zero series for every known label value, so rate() and alerts see a 0, not nothing.
        for step in PROCESSOR_STEPS:
            self._steps.labels(job=self.job, processor=self.processor, phase=step)
        for outcome in HEARTBEAT_OUTCOMES:
            self._heartbeats.labels(job=self.job, processor=self.processor, outcome=outcome)

    def set_store_view(self, store_view: StoreView) -> None:
        """Bind the scrape-time callback returning task -> store bytes (a snapshot)."""
        self._collector.store_view = store_view

    def set_memory_view(self, memory_view: StoreView) -> None:
        """Bind the scrape-time callback returning the stores' memory in bytes, under
        "block_cache" and "memtables" (a snapshot)."""
        self._collector.memory_view = memory_view

    def record_processed(self, task: str, count: int = 1) -> None:
        """`count` input records of active `task` were processed with output."""
        self._processed.labels(job=self.job, processor=self.processor, task=task).inc(count)

    def record_catch_up(self, task: str, path: CatchUpPath, count: int,
                        source: CatchUpSource = "input") -> None:
        """`count` records of `source` were applied to `task`'s store without output,
        via `path`."""
        check_label(path, CATCH_UP_PATHS, "path")
        check_label(source, CATCH_UP_SOURCES, "source")
        self._catch_up.labels(job=self.job, processor=self.processor, task=task,
                              path=path, source=source).inc(count)

    def record_transaction(self, task: str, outcome: TransactionOutcome) -> None:
        """Active `task`'s Kafka transaction ended with `outcome`."""
        check_label(outcome, TRANSACTION_OUTCOMES, "outcome")
        self._transactions.labels(job=self.job, processor=self.processor, task=task,
                                  outcome=outcome).inc()

    def record_handoff_step(self, phase: ProcessorStep, seconds: float) -> None:
        """This processor finished its `releasing` or `activating` step in `seconds`."""
        check_label(phase, PROCESSOR_STEPS, "phase")
        self._steps.labels(job=self.job, processor=self.processor, phase=phase
                           ).observe(seconds)

    def record_spark_session_start(self, seconds: float) -> None:
        """Obtaining a SparkSession took `seconds`."""
        self._spark_start.observe(seconds)

    def record_bulk_catch_up(self, seconds: float) -> None:
        """A Spark bulk catch-up run finished (SSTs ingested) after `seconds`."""
        self._bulk.observe(seconds)

    def record_bulk_fallback(self, task: str) -> None:
        """The Spark bulk path failed for `task`; it catches up through the consumer."""
        self._fallbacks.labels(job=self.job, processor=self.processor, task=task).inc()

    def record_input_trimmed(self, task: str) -> None:
        """A replay of `task` from the input was refused: its start is no longer on the
        broker (processor/retention.py)."""
        self._gaps.labels(job=self.job, processor=self.processor, task=task).inc()

    def record_heartbeat(self, outcome: HeartbeatOutcome) -> None:
        """A heartbeat round trip ended with `outcome`."""
        check_label(outcome, HEARTBEAT_OUTCOMES, "outcome")
        self._heartbeats.labels(job=self.job, processor=self.processor, outcome=outcome
                                ).inc()

    def record_process_error(self, task: str, outcome: ProcessErrorOutcome) -> None:
        """`process()` raised on a record of `task`; `outcome` is what on_error did."""
        check_label(outcome, PROCESS_ERROR_OUTCOMES, "outcome")
        self._errors.labels(job=self.job, processor=self.processor, task=task,
                            outcome=outcome).inc()

    def record_consumer_replaced(self) -> None:
        """The active consumer was cut off from the brokers and replaced."""
        self._replacements.inc()

    def record_stall(self, task: str, role: str) -> None:
        """A read of `task` (in `role`) was found stalled (processor/runtime/stalls.py)."""
        check_label(role, STALL_ROLES, "role")
        self._stalls.labels(job=self.job, processor=self.processor, task=task, role=role
                            ).inc()

    def record_misrouted(self, task: str, source: str = "", child: str = "") -> None:
        """One misrouted record forwarded from `source` to `child` (not labels: the
        partition vocabulary is unbounded; the processor's log names them)."""
        self._misrouted.labels(job=self.job, processor=self.processor, task=task).inc()

    def record_effect_error(self, task: str) -> None:
        """An after_commit function of `task`'s job raised."""
        self._effect_errors.labels(job=self.job, processor=self.processor, task=task).inc()

    def forget_task(self, task: str) -> None:
        """Remove `task`'s series (the job's own too): the processor no longer holds
        the task."""
        me = (self.job, self.processor, task)
        self.job_metrics.forget(task)
        _remove(self._effect_errors, me)
        _remove(self._processed, me)
        _remove(self._fallbacks, me)
        _remove(self._misrouted, me)
        for path in CATCH_UP_PATHS:
            for source in CATCH_UP_SOURCES:
                _remove(self._catch_up, (*me, path, source))
        for outcome in TRANSACTION_OUTCOMES:
            _remove(self._transactions, (*me, outcome))
        for error in PROCESS_ERROR_OUTCOMES:
            _remove(self._errors, (*me, error))


class NullProcessorMetrics(ProcessorMetrics):
    """The metrics of a processor nobody scrapes (tests, benches, embedded runs).

    Same methods as `ProcessorMetrics`, each doing nothing, so the processor always
    holds a metrics object and never asks whether it has one. Registers nothing.
    """

    def __init__(self, job: str = "", processor: str = "") -> None:  # no super(): no registry
        self.job = job
        self.processor = processor
        self.job_metrics = JobMetricSet.unserved()

    def set_store_view(self, store_view: StoreView) -> None:
        pass

    def set_memory_view(self, memory_view: StoreView) -> None:
        pass

    def record_processed(self, task: str, count: int = 1) -> None:
        pass

    def record_catch_up(self, task: str, path: CatchUpPath, count: int,
                        source: CatchUpSource = "input") -> None:
        pass

    def record_transaction(self, task: str, outcome: TransactionOutcome) -> None:
        pass

    def record_handoff_step(self, phase: ProcessorStep, seconds: float) -> None:
        pass

    def record_spark_session_start(self, seconds: float) -> None:
        pass

    def record_bulk_catch_up(self, seconds: float) -> None:
        pass

    def record_bulk_fallback(self, task: str) -> None:
        pass

    def record_input_trimmed(self, task: str) -> None:
        pass

    def record_heartbeat(self, outcome: HeartbeatOutcome) -> None:
        pass

    def record_process_error(self, task: str, outcome: ProcessErrorOutcome) -> None:
        pass

    def record_misrouted(self, task: str, source: str = "", child: str = "") -> None:
        pass

    def record_consumer_replaced(self) -> None:
        pass

    def record_stall(self, task: str, role: str) -> None:
        pass

    def record_effect_error(self, task: str) -> None:
        pass

    def forget_task(self, task: str) -> None:
        pass


def _remove(counter: Counter, labelvalues: tuple[str, ...]) -> None:
    try:
        counter.remove(*labelvalues)
    except KeyError:  # never created: nothing to forget
        pass


class _StoreCollector(Collector):
    """The stores' gauges, read from the processor's views at scrape time:
    `baton_store_bytes` per task, and the memory every store shares (the block cache,
    the memtables), which a processor's RSS follows (docs/operations.md, "Memory and
    open files per processor")."""

    def __init__(self, job: str, processor: str, errors: Counter) -> None:
        self.job = job
        self.processor = processor
        self.errors = errors
        self.store_view: StoreView = _no_stores
        self.memory_view: StoreView = _no_stores

    def describe(self) -> Iterable[Metric]:
        return [_store_family(), *_memory_families().values()]

    def collect(self) -> Iterator[Metric]:
        sizes = self._read(self.store_view, "store_view", "baton_store_bytes")
        if sizes is not None:
            family = _store_family()
            for task, size in sorted(sizes.items()):
                family.add_metric([self.job, self.processor, task], size)
            yield family
        memory = self._read(self.memory_view, "memory_view", "the store memory gauges")
        if memory:
            for part, family in _memory_families().items():
                family.add_metric([self.job, self.processor], memory.get(part, 0))
                yield family

    def _read(self, view: StoreView, name: str, what: str) -> dict[str, int] | None:
        try:
            return dict(view())
        except Exception:  # a broken view must not fail the whole scrape
            log.exception("metrics: the processor's %s callback failed; %s left out of "
                          "this scrape", name, what)
            self.errors.inc()
            return None


def _store_family() -> GaugeMetricFamily:
    return GaugeMetricFamily("baton_store_bytes", "Size of a task's RocksDB store on disk.",
                             labels=["job", "processor", "task"])


def _memory_families() -> dict[str, GaugeMetricFamily]:
    return {
        "block_cache": GaugeMetricFamily(
            "baton_store_block_cache_bytes", "Bytes held by the block cache every store of "
            "the processor shares (at most [store] block_cache_mb).",
            labels=["job", "processor"]),
        "memtables": GaugeMetricFamily(
            "baton_store_memtable_bytes", "Bytes held by the memtables of all the "
            "processor's stores (flushed past [store] memtables_mb).",
            labels=["job", "processor"]),
    }
