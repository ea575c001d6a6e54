"""What the Spark tasks of a bulk catch-up run on the executors, per plan
(processor/spark/bulk.py says which plan and why).

- `local`: `replay_and_write` replays a whole range in offset order on one state and
  writes its SST;
- `shuffle`: `group_chunks` (map side) groups a chunk's records by key, `fold_and_write`
  (reduce side) folds each key's pieces in (range order, offset) order and writes an SST.

Each SST task returns its file's bytes and 64-bit hashes of its state keys (`SstPart`).
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import chain
from pathlib import Path
from typing import Any

from processor.job import Headers, Job
from processor.jobspec import JobSpec
from processor.replica import KeyFilter, new_record
from processor.spark.fold import FoldState, replay
from processor.spark.ingest import Source
from processor.spark.reader import Chunk, read_batches, read_range, without_markers
from store import changelog_offset, decode_changelog, encode_key, write_encoded_sst
from store.codec import OFFSET_PREFIX

__all__ = ["SstPart", "apply_record", "fold_and_write", "fold_groups", "group_chunks",
           "process_batches", "replay_and_write", "sst_part"]


def apply_record(job: Job | None, chunk: Chunk, key: bytes | None, value: bytes | None,
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


def sst_part(index: int, raw_state: dict[Any, bytes], offsets: dict[str, int],
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
            write_encoded_sst(path, raw_state, offsets)
            data = path.read_bytes()
    hashes = array("Q", (int.from_bytes(hashlib.blake2b(encode_key(k), digest_size=8)
                                        .digest(), "little") for k in chain(raw_state, twice)))
    if timings is not None:
        timings.add({"write": time.process_time() - began})
    if data:
        yield index, data, len(raw_state), hashes.tobytes(), [repr(k) for k in twice[:3]]


def replay_and_write(spec: JobSpec, settings: Mapping[str, Any], source: Source,
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
                count, skipped = process_batches(job, chunk, batches, state)
            finally:
                job.close()
        else:
            for batch in batches:
                for msg in batch:
                    apply_record(None, chunk, msg.key(), msg.value(), msg.offset(), 0, state)
                count += len(batch)
        written = time.process_time()
        if timings is not None:
            timings.add({"replay": written - began, "records": count, "skipped": skipped})
        own = offsets if chunk.order == first else {}
        yield from sst_part(chunk.order, state.settle(), {**own, **state.carried},
                             timings, written)


def process_batches(job: Job, chunk: Chunk, batches: Iterable[list[Any]],
                     state: FoldState) -> tuple[int, int]:
    """The hot loop of the local plan: `replay` inlined; (records, records skipped)."""
    topic, partition, count, skipped = chunk.topic, chunk.partition, 0, 0
    process, begin, drain = job.process, state.begin, _drain
    for batch in batches:
        for msg in batch:
            record = new_record(msg.key(), msg.value(), topic, partition, msg.offset(),
                                msg.timestamp()[1], msg.headers() or ())
            begin()
            state.now = record.timestamp
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


def fold_and_write(spec: JobSpec, source: Source, chunks: Mapping[int, Chunk],
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
        raw_state, carried, twice, skipped = fold_groups(job, chunks, groups)
    finally:
        if job is not None:
            job.close()
    written = time.process_time()
    if timings is not None:
        timings.add({"fold": written - began, "skipped": skipped})
    own = offsets if index == 0 else {}
    yield from sst_part(index, raw_state, {**own, **carried}, timings, written, twice)


def fold_groups(job: Job | None, chunks: Mapping[int, Chunk],
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
                if not apply_record(job, chunk, key, value, offset, timestamp, state, headers):
                    skipped += 1
        twice.extend(k for k in state.raw if k in raw_state)
        raw_state.update(state.settle())
        carried.update(state.carried)
    return raw_state, carried, twice, skipped
