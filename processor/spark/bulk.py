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
import hashlib
import logging
import math
import re
import tempfile
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import chain
from pathlib import Path
from typing import Any, Literal

from processor.job import Headers, Job, load_job
from processor.jobspec import JobSpec, job_spec
from processor.replica import KeyFilter, new_record
from processor.spark.code import ship_job_code
from processor.spark.fold import FoldState, Timings, replay
from processor.spark.ingest import BulkCatchUpError, BulkResult, Source, ingest_bulk
from processor.spark.reader import (
    Chunk,
    Ranges,
    key_partition,
    parse_ranges,
    plan_chunks,
    read_batches,
    read_range,
    without_markers,
)
from processor.spark.session import SparkUnavailableError, spark_failure, spark_session
from store import changelog_offset, decode_changelog, decode_value, encode_key, write_sst
from store.codec import OFFSET_PREFIX

__all__ = [
    "BulkCatchUpError", "BulkResult", "KeyFilter", "LOCAL_MAX_RANGE_RECORDS", "Plan",
    "RECORDS_PER_SST", "Source", "SstPart", "bulk_catch_up", "group_chunks", "log",
    "run_bulk_catch_up",
]


log = logging.getLogger(__name__)




Plan = Literal["auto", "local", "shuffle"]




# Largest range the local plan replays in one task: its whole state sits in one Python
# worker (~200 bytes a key); beyond this the shuffle plan spreads it over several files.
LOCAL_MAX_RANGE_RECORDS = 10_000_000


# Records per SST file of the shuffle plan (one reduce task each): bounds a reduce
# task's memory and keeps every file well under Spark's 2 GB block limit.
RECORDS_PER_SST = 2_000_000






def _apply(job: Job | None, chunk: Chunk, key: bytes | None, value: bytes | None,
           offset: int, timestamp: int, state: FoldState, headers: Headers = ()) -> bool:
    """Apply one record: process() for `input` (job given), last write for `changelog`.
    False if process() raised (the record is skipped, see `replay`)."""
    if job is None:
        if key is not None and key.startswith(OFFSET_PREFIX):
            carried = changelog_offset(key, value)      # an input offset, not state
            if carried is not None:
                state.carried[carried[0]] = carried[1]
            return True
        state_key, raw = decode_changelog(key, value)
        if raw is None:
            state.raw.pop(state_key, None)
        else:
            state.raw[state_key] = raw
        return True
    return replay(job, state, new_record(key, value, chunk.topic, chunk.partition, offset,
                                         timestamp, headers))


# (file index, SST bytes, keys, state-key hashes, names of keys folded twice)
SstPart = tuple[int, bytes, int, bytes, list[str]]


def _sst_part(index: int, raw_state: dict[Any, bytes], offsets: dict[str, int],
              timings: Any, began: float, twice: Iterable[Any] = ()) -> Iterator[SstPart]:
    """Write one SST (on this executor's disk) and yield its bytes and key hashes.

    Keys in `twice` (already folded from another record key) are hashed again, so the
    driver's duplicate check sees them without failing (and retrying) this task.
    """
    twice = list(twice)
    data = b""
    if raw_state or offsets:
        with tempfile.TemporaryDirectory(prefix="baton-sst-") as tmp:
            path = Path(tmp) / f"part-{index:05d}.sst"
            write_sst(path, ((k, decode_value(v)) for k, v in raw_state.items()), offsets)
            data = path.read_bytes()
    hashes = array("Q", (int.from_bytes(hashlib.blake2b(encode_key(k), digest_size=8)
                                        .digest(), "little") for k in chain(raw_state, twice)))
    if timings is not None:
        timings.add({"write": time.process_time() - began})
    if data:
        yield index, data, len(raw_state), hashes.tobytes(), [repr(k) for k in twice[:3]]


def _replay_and_write(spec: JobSpec, settings: Mapping[str, Any], source: Source,
                      offsets: dict[str, int], first: int, timings: Any,
                      chunks: Iterable[Chunk]) -> Iterator[SstPart]:
    """Local plan: replay a whole range in offset order on one state, then write it."""
    for chunk in chunks:
        began = time.process_time()
        state, count, skipped = FoldState(), 0, 0
        where = f"{chunk.topic}:{chunk.partition}"
        batches = ([*without_markers(batch, where, refuse=True)]
                   for batch in read_batches(settings, chunk.topic, chunk.partition,
                                             chunk.start, chunk.end))
        if source == "input":
            job = spec.make([f"{chunk.topic}:{chunk.partition}"])
            try:
                count, skipped = _process_batches(job, chunk, batches, state)
            finally:
                job.close()
        else:
            for batch in batches:
                for msg in batch:
                    _apply(None, chunk, msg.key(), msg.value(), msg.offset(), 0, state)
                count += len(batch)
        written = time.process_time()
        if timings is not None:
            timings.add({"replay": written - began, "records": count, "skipped": skipped})
        own = offsets if chunk.order == first else {}
        yield from _sst_part(chunk.order, state.settle(), {**own, **state.carried},
                             timings, written)


def _process_batches(job: Job, chunk: Chunk, batches: Iterable[list[Any]],
                     state: FoldState) -> tuple[int, int]:
    """The hot loop of the local plan: `replay` inlined; (records, records skipped)."""
    topic, partition, count, skipped = chunk.topic, chunk.partition, 0, 0
    process, begin, drain = job.process, state.begin, _drain
    for batch in batches:
        for msg in batch:
            record = new_record(msg.key(), msg.value(), topic, partition, msg.offset(),
                                msg.timestamp()[1], msg.headers() or ())
            begin()
            try:
                drain(process(record, state) or ())
            except Exception:  # noqa: BLE001 - user code: skipped as `replay` explains
                state.rollback()
                skipped += 1
        count += len(batch)
    return count, skipped


# runs a generator to its end, discarding what it yields, without a Python-level loop
_drain: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


def group_chunks(settings: Mapping[str, Any], source: Source, key_filter: KeyFilter | None,
                 timings: Any, chunks: Iterable[Chunk]) -> Iterator[tuple[Any, Any]]:
    """Shuffle plan, map side: read chunks, yield (key, piece) per key and chunk.

    A piece is (order, first offset, rows), rows [(offset, value, timestamp, headers)] in offset
    order; for `changelog` only the chunk's last write of the key.
    """
    for chunk in chunks:
        began = time.process_time()
        rows: dict[bytes | None, list[tuple[int, bytes | None, int, Headers]]] = {}
        count = 0
        for msg in without_markers(read_range(settings, chunk.topic, chunk.partition,
                                              chunk.start, chunk.end),
                                   f"{chunk.topic}:{chunk.partition}", refuse=True):
            count += 1
            key = msg.key()
            if key_filter is not None and not key_filter(key):
                continue
            row = (msg.offset(), msg.value(), msg.timestamp()[1], msg.headers() or ())
            if source == "changelog" or (known := rows.get(key)) is None:
                rows[key] = [row]
            else:
                known.append(row)
        if timings is not None:
            timings.add({"read": time.process_time() - began, "records": count})
        for key, found in rows.items():
            yield key, (chunk.order, found[0][0], found)


def _fold_and_write(spec: JobSpec, source: Source, chunks: Mapping[int, Chunk],
                    offsets: dict[str, int], timings: Any, index: int,
                    pieces: Iterable[tuple[Any, Any]]) -> Iterator[SstPart]:
    """Shuffle plan, reduce side: fold each key in (order, offset) order, write the SST."""
    groups: dict[Any, list[Any]] = {}
    for key, piece in pieces:
        groups.setdefault(key, []).append(piece)
    began = time.process_time()
    job = spec.make(sorted({f"{c.topic}:{c.partition}" for c in chunks.values()})
                    ) if source == "input" else None
    try:
        raw_state, carried, twice, skipped = _fold_groups(job, chunks, groups)
    finally:
        if job is not None:
            job.close()
    written = time.process_time()
    if timings is not None:
        timings.add({"fold": written - began, "skipped": skipped})
    own = offsets if index == 0 else {}
    yield from _sst_part(index, raw_state, {**own, **carried}, timings, written, twice)


def _fold_groups(job: Job | None, chunks: Mapping[int, Chunk],
                 groups: Mapping[Any, list[Any]]
                 ) -> tuple[dict[Any, bytes], dict[str, int], list[Any], int]:
    """Fold each key's pieces on its own state: (raw state, carried offsets, keys seen
    in several folds, records skipped)."""
    raw_state: dict[Any, bytes] = {}
    carried: dict[str, int] = {}
    twice: list[Any] = []
    skipped = 0
    for key, found in groups.items():
        state = FoldState()
        for order, _, rows in sorted(found, key=lambda piece: (piece[0], piece[1])):
            chunk = chunks[order]
            for offset, value, timestamp, headers in rows:
                if not _apply(job, chunk, key, value, offset, timestamp, state, headers):
                    skipped += 1
        twice.extend(k for k in state.raw if k in raw_state)
        raw_state.update(state.settle())
        carried.update(state.carried)
    return raw_state, carried, twice, skipped


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
                _replay_and_write, spec, settings, source, offsets, chunks[0].order,
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
        functools.partial(_fold_and_write, spec, source, by_order, offsets, timings))


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


def run_bulk_catch_up(config: Any, store: Any, ranges: Ranges, task: str, *,
                      key_filter: KeyFilter | None = None) -> BulkResult:
    """The processor's one call: Spark session, bulk catch-up, ingest (T2 included).

    Args:
        config: the `orchestrator.wire.config.Config` (spark.master, catch_up.source, job, kafka).
        store: the task's open, empty TaskStore.
        ranges: {"topic:N": (start, end)} of S2 (input partitions, or the changelog
            partitions for source "changelog"); `end` becomes T2.
        task: the task's name.
        key_filter: a split child's filter on the parent partition's keys.

    Returns:
        The result, already ingested (its timings include "ingest").

    Raises:
        BulkCatchUpError: anything went wrong (Java or the master missing included);
            the store is untouched, so the caller falls back to the consumer path.
    """
    try:
        spark = spark_session(config.spark.master, conf=config.spark.conf)
    except SparkUnavailableError as exc:
        raise BulkCatchUpError(f"task {task}: {exc}") from exc
    result = bulk_catch_up(spark, job_spec(config),
                           config.kafka_settings(), ranges,
                           config.catch_up.source, task, key_filter=key_filter)
    ingest_bulk(store, result)
    return result


def _describe(ranges: Ranges) -> str:
    return ", ".join(f"{name} [{lo}, {hi})" for name, (lo, hi) in ranges.items())


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "task"
