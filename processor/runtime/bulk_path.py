"""The bulk path: a warmup with a large backlog catches up on Spark first.

A new warmup whose store is empty and whose lag exceeds `catch_up.bulk_threshold`
hands its ranges to Spark on a worker thread (Spark only: no store or consumer of the
main loop). The loop then ingests the result into the store in one atomic step and
the replay consumer takes the tail. Any failure falls back to the consumer path from
where the store is, with a warning and a metric. Spark (and pyspark) load only when a
warmup needs them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from metrics import ProcessorMetrics
from orchestrator.wire.config import CatchUpSource, Config
from orchestrator.wire.partitions import split_partition
from processor.job import Job
from processor.replica import KeyFilter, Replay
from processor.timed_job import uses_timers

if TYPE_CHECKING:       # the Spark path (and pyspark) loads only when a warmup needs it
    from processor.spark.bulk import BulkResult

__all__ = ["BulkPath", "BulkPlan", "changelog_bulk_plan", "input_bulk_plan"]

log = logging.getLogger("baton.processor.runtime")


@dataclass(frozen=True)
class BulkPlan:
    """What Spark catches a fresh replica up over."""

    ranges: dict[str, tuple[int, int]]      # partition -> [from, to)
    source: CatchUpSource
    what: str                               # what its records are, for the log
    key_filter: KeyFilter | None = None     # a split child's ancestors: its keys only

    def describe(self) -> str:
        """What the plan covers, for the log."""
        return f"{sum(hi - lo for lo, hi in self.ranges.values())} {self.what}"


def input_bulk_plan(replica: Replay, threshold: int) -> BulkPlan | None:
    """The ranges (and key filter) Spark should replay for a fresh input replica, if its
    backlog exceeds `threshold` records. A split child's bulk part is its ancestors (one
    topic, one filter); its own partitions follow through the consumer once they are
    read. Never for a job with timers: Spark folds each key on its own, and a timer
    fires by its partition's clock, which every record of the partition moves."""
    if uses_timers(getattr(replica, "job", Job)):
        return None
    ancestors = [p for p in replica.partitions if p in replica.filters]
    if len({split_partition(a)[0] for a in ancestors}) > 1:
        return None     # filters of several topics: the consumer path sorts them
    chosen = ancestors or replica.partitions
    # a parent partition's bulk range ends at its first expansion barrier: past it,
    # misrouted records must be skipped, which the consumer path does
    ends = {p: min(replica.caps[p], r.first) for p, r in replica.reroutes.items()}
    ranges = {p: (replica.positions[p], ends.get(p, replica.caps[p])) for p in chosen}
    ranges = {p: (lo, hi) for p, (lo, hi) in ranges.items() if hi > lo}
    if not ranges:
        return None
    if sum(hi - lo for lo, hi in ranges.values()) <= threshold:
        return None
    return BulkPlan(ranges, "input", "records to catch up",
                    replica.filters[ancestors[0]] if ancestors else None)


def changelog_bulk_plan(replica: Replay, threshold: int) -> BulkPlan | None:
    """The changelog range Spark should fold for a fresh changelog replica, if more than
    `threshold` records lie between its position and the partition's committed end."""
    ranges = {p: (replica.positions[p], replica.caps[p]) for p in replica.partitions}
    if sum(hi - lo for lo, hi in ranges.values()) <= threshold:
        return None
    return BulkPlan(ranges, "changelog", "changelog records to apply")


class BulkPath:
    """The warmups on the Spark path, one Spark run at a time.

    Args:
        config: the job's configuration (Spark master, job class, Kafka settings).
        metrics: Spark session start, bulk run durations, fallbacks, records ingested.
    """

    def __init__(self, config: Config, metrics: ProcessorMetrics) -> None:
        self._config = config
        self._metrics = metrics
        self._running: dict[str, Future[BulkResult]] = {}
        self._sources: dict[str, CatchUpSource] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="baton-bulk")
        self._spark_started = False

    def __contains__(self, task: object) -> bool:
        """`task` is on the Spark path (running, or its result not yet ingested)."""
        return task in self._running

    @property
    def busy(self) -> bool:
        """True while a bulk catch-up is running or waits to be ingested."""
        return bool(self._running)

    def start(self, task: str, plan: BulkPlan) -> None:
        """Catch `task` up over the plan's ranges on Spark, keeping only the records
        whose key passes its key filter; from the changelog, the ranges are the task's
        changelog partition, folded last write wins."""
        log.info("task %r: %s: bulk path on Spark (%s)%s", task, plan.describe(),
                 self._config.spark.master, " with a key filter" if plan.key_filter else "")
        self._sources[task] = plan.source
        self._running[task] = self._pool.submit(self._run, task, plan.ranges,
                                                plan.key_filter, plan.source)

    def _run(self, task: str, ranges: dict[str, tuple[int, int]],
             key_filter: KeyFilter | None, source: CatchUpSource) -> BulkResult:
        """On a worker thread: Spark only, no store or consumer of the main loop."""
        from processor.spark import startup_seconds
        from processor.spark.bulk import run_bulk_catch_up

        try:
            return run_bulk_catch_up(self._config, ranges, task, source=source,
                                     key_filter=key_filter)
        finally:
            started = startup_seconds()
            if started is not None and not self._spark_started:
                self._spark_started = True
                self._metrics.record_spark_session_start(started)

    def progress(self, replicas: Mapping[str, Replay],
                 resume: Callable[[Replay], None]) -> None:
        """Ingest finished bulk catch-ups (one atomic step); a failure falls back to the
        consumer path from where the store is, with a warning and a metric.

        Args:
            replicas: the runtime's replicas; a task no longer there (dropped) or
                activating meanwhile does not need its result.
            resume: hands a replica to the replay consumer for the tail.
        """
        from processor.spark.ingest import ingest_bulk

        for task, future in list(self._running.items()):
            if not future.done():
                continue
            del self._running[task]
            replica = replicas.get(task)
            try:
                result = future.result()
                if replica is None or replica.role == "activating":
                    result.cleanup()        # dropped or activated meanwhile: not needed
                    continue
                ingest_bulk(replica.store, result)
            except Exception as exc:  # noqa: BLE001 - any Spark failure: fall back
                log.warning("task %r: bulk catch-up failed, the consumer path takes over: %s",
                            task, exc)
                self._metrics.record_bulk_fallback(task)
            else:
                replica.ingested(result.offsets)
                log.info("task %r: bulk catch-up ingested %d records (%d keys) in %.1fs", task,
                         result.records, result.keys, result.timings.get("total", 0.0))
                self._metrics.record_catch_up(task, "spark", result.records,
                                              self._sources.pop(task, "input"))
                self._metrics.record_bulk_catch_up(result.timings.get("total", 0.0))
            if replica is not None and task in replicas:
                resume(replica)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
