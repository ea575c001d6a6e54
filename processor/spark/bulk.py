"""Spark bulk catch-up: rebuild a task's state from a large backlog in parallel.

Theory of operation
-------------------
*Read.* One Spark task per (partition, offset range) reads it with a plain confluent-kafka
consumer (assign + consume, read_committed) inside the executor: no Spark Kafka
connector. A range can be cut into sub-ranges (`chunk_records`) to read one partition
on several cores; that is off by default because a read_committed fetch that starts
mid-partition is only as good as the broker's aborted-transaction index: noida-db 0.2.3
reports transactions that ended before the fetch offset, and the client then drops the
rest of that producer's records. Reads from a range's start are safe everywhere.

*Secrets.* Those consumers need the `[kafka]` settings, secrets included (SASL
passwords, key PEMs; see `orchestrator.wire.secrets`). They travel only inside the
pickled read functions Spark ships with each task (`functools.partial` arguments):
never as Spark configuration, reader options, job descriptions or RDD names, so the
Spark UI, event logs and plans do not show them. On a cluster that payload crosses the
network to the executors: enable `spark.authenticate` and `spark.network.crypto.enabled`
there. Errors that come back are masked (`Config.mask`, the daemons' logging) before
they are logged or shown.

*Fold.* `process()` is not associative, so a key's records must meet in offset order.
Two plans, chosen per call (`plan="auto"`):

- `local`: each read task replays its whole range, in offset order, through the job
  with one state for the range (exactly the consumer path, without the store), and
  writes its own SST. No shuffle, no per-key grouping: the cheapest plan, correct when
  no state key is written from two ranges. `auto` picks it when the ranges are distinct
  partitions of ONE topic with no key filter (Kafka partitions by key), there are at
  least as many ranges as cores, and none is huge (its state sits in one worker).
- `shuffle`: read tasks group their records by key; a shuffle on the key (crc32, the
  same on every host) brings each key's pieces to one reduce task, which sorts them by
  (range order, offset) and folds each key on its own state. It handles keys spanning
  ranges (several input topics; a split child's parent range, filtered, then its own)
  and spreads the fold of few partitions over every core.

Every SST task also returns 64-bit hashes of its state keys; the driver refuses results
where two files hold one key (the `local` plan then reruns as `shuffle`; under `shuffle`
the job keeps state across record keys, which no parallel fold can reproduce).

*Files.* Executors write sorted SSTs with `store.write_sst` on their own disks and
return the BYTES (on a cluster the executors' disks are not the driver's); the task of
the first range also carries T2 = the range ends. The driver persists the results,
then streams them one file at a time into its own directory.

*Ingest.* `ingest_bulk` hands every file to ONE `TaskStore.ingest` call, which RocksDB
applies atomically (all files or none): the store never holds half a catch-up, and T2
lands with the data. The store must be empty: SSTs add and override keys but cannot
delete, and the fold starts from an empty state.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import re
import tempfile
import time
from array import array
from collections.abc import Mapping
from itertools import chain
from pathlib import Path
from typing import Any, Literal

from processor.job import load_job
from processor.jobspec import JobSpec, job_spec
from processor.replica import KeyFilter
from processor.spark.code import ship_job_code
from processor.spark.fold import Timings
from processor.spark.ingest import BulkCatchUpError, BulkResult, Source
from processor.spark.plans import fold_and_write, group_chunks, replay_and_write
from processor.spark.reader import (
    Chunk,
    Ranges,
    key_partition,
    parse_ranges,
    plan_chunks,
)
from processor.spark.retained import check_ranges_retained
from processor.spark.session import SparkUnavailableError, spark_failure, spark_session
from store import write_sst

__all__ = [
    "BulkCatchUpError", "BulkResult", "LOCAL_MAX_RANGE_RECORDS", "Plan", "RECORDS_PER_SST",
    "Source", "bulk_catch_up", "run_bulk_catch_up",
]


log = logging.getLogger(__name__)


Plan = Literal["auto", "local", "shuffle"]


# Largest range the local plan replays in one task: its whole state sits in one Python
# worker (~200 bytes a key); beyond this the shuffle plan spreads it over several files.
LOCAL_MAX_RANGE_RECORDS = 10_000_000


# Records per SST file of the shuffle plan (one reduce task each): bounds a reduce
# task's memory and keeps every file well under Spark's 2 GB block limit.
RECORDS_PER_SST = 2_000_000


_CROSS_KEY = ("a state key is written from several ranges or record keys ({}): the job "
              "keeps state across keys, which a parallel fold cannot reproduce; catch this "
              "task up through the consumer")


class _SharedKeys(Exception):
    """Two SST files hold one state key (see the module docstring)."""


def bulk_catch_up(spark: Any, job_class_path: str | JobSpec, kafka_settings: Mapping[str, Any],
                  ranges: Ranges, source: Source, task: str, *,
                  key_filter: KeyFilter | None = None, plan: Plan = "auto",
                  chunk_records: int | None = None, sst_files: int | None = None,
                  directory: Path | None = None) -> BulkResult:
    """Build a task's state for `ranges` on Spark, as SST files on the driver.

    Args:
        spark: the SparkSession (see `processor.spark.spark_session`).
        job_class_path: "module:Class" of the job, or a JobSpec with its params
            (unused for `changelog`).
        kafka_settings: librdkafka settings of the cluster holding the ranges.
        ranges: {"topic:N": (start, end)}; keys spanning ranges fold in this order.
        source: "input" (replay through process()) or "changelog" (last write wins).
        task: the task's name, for file names and errors.
        key_filter: keep only records whose key passes (a split child's parent range).
        plan: "local", "shuffle" or "auto" (see the module docstring).
        chunk_records: shuffle plan: cut ranges into read tasks of this many offsets
            (default: one read task per range; see the module docstring first).
        sst_files: shuffle plan: number of SST files (one reduce task each).
        directory: where the files go on the driver (default: a new temp directory).

    Returns:
        The files and T2 = {"topic:N": end}; pass it to `ingest_bulk`.

    Raises:
        BulkCatchUpError: the job cannot be loaded, Spark failed after its task retries,
            or the job keeps state across keys.
        InputTrimmedError: source "input" and a range's start is no longer on the broker
            (processor/retention.py).
        ValueError: malformed ranges, or plan "local" with a key filter.
    """
    started = time.monotonic()
    whole = parse_ranges(ranges)
    spec = dataclasses.replace(JobSpec.of(job_class_path), task=task)
    if source == "input":
        try:
            load_job(spec.class_path, spec.path)
            ship_job_code(spark.sparkContext, spec.path)    # for the executors' imports
        except ValueError as exc:
            raise BulkCatchUpError(f"task {task}: {exc}") from None
        check_ranges_retained(kafka_settings, ranges, task)     # never a suffix
    if plan == "local" and (key_filter is not None or chunk_records):
        raise ValueError("the local plan replays whole ranges: no key_filter, no chunks")
    sc = spark.sparkContext
    chosen = _choose(plan, whole, key_filter, chunk_records, sc.defaultParallelism)
    args = (sc, spec, dict(kafka_settings), ranges, source, task, key_filter,
            chunk_records, sst_files, directory)
    try:
        result = _attempt(chosen, *args)
    except _SharedKeys as exc:
        if chosen == "shuffle":
            raise BulkCatchUpError(f"task {task}: " + _CROSS_KEY.format(exc)) from None
        log.warning("task %s: a state key was written from several ranges (%s); "
                    "rerunning the bulk catch-up with the shuffle plan", task, exc)
        try:
            result = _attempt("shuffle", *args)
        except _SharedKeys as again:
            raise BulkCatchUpError(f"task {task}: " + _CROSS_KEY.format(again)) from None
        result.plan = "shuffle (local plan found keys spanning ranges)"
    result.timings["total"] = time.monotonic() - started
    return result


def _choose(plan: Plan, whole: list[Chunk], key_filter: KeyFilter | None,
            chunk_records: int | None, cores: int) -> str:
    """`auto`: local when keys cannot span ranges, every core gets a range, and no range
    is so large that its whole state would crowd one Python worker's memory."""
    if plan != "auto":
        return plan
    partitions = {(c.topic, c.partition) for c in whole}
    local = (len({c.topic for c in whole}) == 1 and len(partitions) == len(whole)
             and key_filter is None and not chunk_records and len(whole) >= cores
             and max(c.end - c.start for c in whole) <= LOCAL_MAX_RANGE_RECORDS)
    return "local" if local else "shuffle"


def _attempt(plan: str, sc: Any, spec: JobSpec, settings: dict[str, Any],
             ranges: Ranges, source: Source, task: str, key_filter: KeyFilter | None,
             chunk_records: int | None, sst_files: int | None,
             directory: Path | None) -> BulkResult:
    whole = parse_ranges(ranges)
    offsets = {f"{c.topic}:{c.partition}": c.end for c in whole}
    out_dir = directory or Path(tempfile.mkdtemp(prefix=f"baton-bulk-{_safe(task)}-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    result = BulkResult(task, source, plan, out_dir, [], offsets)
    timings = sc.accumulator({}, Timings())
    chunks = plan_chunks(ranges, chunk_records if plan == "shuffle" else None)
    try:
        if not chunks:
            _offsets_only(result)
        elif plan == "local":
            written = sc.parallelize(chunks, len(chunks)).mapPartitions(functools.partial(
                replay_and_write, spec, settings, source, offsets, chunks[0].order,
                timings))
            _collect(written, result)
        else:
            _collect(_shuffled(sc, spec, settings, source, key_filter, chunks, whole,
                               offsets, sst_files, timings), result)
    except (BulkCatchUpError, _SharedKeys):
        result.cleanup()
        raise
    except Exception as exc:  # noqa: BLE001 - py4j/pyspark raise many types for a job
        result.cleanup()
        raise BulkCatchUpError(
            f"bulk catch-up of task {task} ({_describe(ranges)}, source {source}) failed "
            f"after Spark's task retries: {spark_failure(exc)}") from exc
    result.records = int(timings.value.pop("records", 0))
    result.skipped = int(timings.value.pop("skipped", 0))
    result.timings.update({k: float(v) for k, v in timings.value.items()})
    return result


def _shuffled(sc: Any, spec: JobSpec, settings: dict[str, Any], source: Source,
              key_filter: KeyFilter | None, chunks: list[Chunk], whole: list[Chunk],
              offsets: dict[str, int], sst_files: int | None, timings: Any) -> Any:
    cores = max(sc.defaultParallelism, 1)  # files in whole waves of reduce tasks
    total = sum(c.end - c.start for c in chunks)
    files = sst_files or cores * max(1, math.ceil(total / (cores * RECORDS_PER_SST)))
    keyed = sc.parallelize(chunks, len(chunks)).mapPartitions(
        functools.partial(group_chunks, settings, source, key_filter, timings))
    by_order = {c.order: c for c in whole}
    return keyed.partitionBy(files, key_partition).mapPartitionsWithIndex(
        functools.partial(fold_and_write, spec, source, by_order, offsets, timings))


def _collect(written: Any, result: BulkResult) -> None:
    """Run every SST task in parallel, then fetch the files one partition at a time,
    the next one prefetched (driver memory bounded by two files), and check that no
    state key is in two files."""
    from pyspark import StorageLevel

    began = time.monotonic()
    written.persist(StorageLevel.MEMORY_AND_DISK)
    hashes: list[array[int]] = []
    named: list[str] = []
    try:
        written.count()
        fetched = time.monotonic()
        parts = written.toLocalIterator(prefetchPartitions=True)
        for index, data, keys, key_hashes, twice in parts:
            path = result.directory / f"{_safe(result.task)}-{index:05d}.sst"
            path.write_bytes(data)
            result.sst_paths.append(path)
            result.keys += keys
            hashes.append(array("Q", key_hashes))
            named.extend(twice)
    finally:
        written.unpersist()
    result.timings["spark"] = fetched - began
    result.timings["fetch"] = time.monotonic() - fetched
    total = sum(len(h) for h in hashes)
    if len(set(chain.from_iterable(hashes))) < total:
        result.cleanup()
        raise _SharedKeys(", ".join(dict.fromkeys(named)) or f"{total} keys in "
                          f"{len(hashes)} files, some in several")


def _offsets_only(result: BulkResult) -> None:
    """Empty ranges: T2 alone, written on the driver."""
    path = result.directory / f"{_safe(result.task)}-00000.sst"
    write_sst(path, [], result.offsets)
    result.sst_paths.append(path)


def run_bulk_catch_up(config: Any, ranges: Ranges, task: str, *,
                      source: Source | None = None,
                      key_filter: KeyFilter | None = None) -> BulkResult:
    """The processor's one call: the Spark session `[spark]` names, then `bulk_catch_up`
    of the job's ranges. The caller ingests the result (`ingest_bulk`) where the store
    lives: the processor's loop, which must not wait for Spark.

    Args:
        config: the `orchestrator.wire.config.Config` (spark, catch_up.source, job, kafka).
        ranges: {"topic:N": (start, end)} of S2 (input partitions, or the changelog
            partitions for source "changelog"); `end` becomes T2.
        task: the task's name.
        source: what the ranges hold (default: `catch_up.source`).
        key_filter: a split child's filter on the parent partition's keys.

    Raises:
        BulkCatchUpError: anything went wrong (Java or the master missing included);
            nothing was ingested, so the caller falls back to the consumer path.
    """
    try:
        spark = spark_session(config.spark.master, conf=config.spark.conf)
    except SparkUnavailableError as exc:
        raise BulkCatchUpError(f"task {task}: {exc}") from exc
    return bulk_catch_up(spark, job_spec(config), config.kafka_settings(), ranges,
                         source or config.catch_up.source, task, key_filter=key_filter)


def _describe(ranges: Ranges) -> str:
    return ", ".join(f"{name} [{lo}, {hi})" for name, (lo, hi) in ranges.items())


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "task"
