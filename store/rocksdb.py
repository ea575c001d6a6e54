"""The RocksDB task store: one rocksdict database per task, with a transaction overlay.

Theory of operation
-------------------
A `TaskStore` is three parts and the operations that join them:

* `db` (store/db.py): the database, its committed data and its lifecycle;
* `overlay` (store/_overlay.py): the open transaction's entries and a record's undo log;
* `state` (store/task_state.py): the mapping a job's `process()` reads and writes, the
  overlay over the committed data, and the per-record hot path.

What joins them is the transaction and the changelog:

* `commit(offsets)` writes the overlay and the applied offsets in one WriteBatch (see
  store/options.py for durability), then empties the overlay.
* `changes()` is the open transaction as changelog records; `apply_records` writes
  records read back from a changelog, with their offsets, in one WriteBatch.
* SST ingest gives the ingested file a sequence number above everything already in
  the store, so it overrides older values; later commits get higher numbers and
  override it.
"""

from __future__ import annotations

import operator
import os
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import rocksdict

from store._overlay import ABSENT, DELETED, Overlay, add_to_batch, overlay_changes
from store.base import Change, Changes, Offsets
from store.codec import (
    BYTES_TAG,
    DATA_END,
    META_PREFIX,
    OFFSET_PREFIX,
    Key,
    changelog_offset,
    check_changelog_key,
    decode_key,
    encode_offsets,
    rare_keys,
)
from store.db import StoreDb
from store.errors import StoreError
from store.expiry import EXPIRING_TAG, expiry_of
from store.options import StoreMemory
from store.sst import write_sst
from store.task_state import TaskState, merged

if TYPE_CHECKING:
    from store.base import Store

__all__ = ["TaskStore"]

_KEY_OF = operator.itemgetter(0)
_VALUE_OF = operator.itemgetter(1)


class TaskStore:
    """One task's store: its database, its open transaction and its state mapping.

    The arguments, and what opening raises, are those of its database (`StoreDb`,
    store/db.py), which takes them as they are.
    """

    __slots__ = ("db", "overlay", "state", "begin_record", "rollback_record", "__weakref__")

    def __init__(self, path: str | os.PathLike[str], *, sync: bool = False,
                 reads: bool = True, memory: StoreMemory | None = None,
                 wal: bool = True) -> None:
        self.db = StoreDb(path, sync=sync, reads=reads, memory=memory, wal=wal)
        self.overlay = Overlay(self.db.path)
        self.state = TaskState(self.db, self.overlay)
        # a record's undo log (store/_overlay.py): the overlay's own methods, bound here
        # because the processor calls them once per record
        self.begin_record = self.overlay.begin_record
        self.rollback_record = self.overlay.rollback_record

    @property
    def path(self) -> Path:
        """The store's directory."""
        return self.db.path

    def __repr__(self) -> str:
        return f"TaskStore({str(self.db.path)!r})"

    def expect_reads(self) -> None:
        """The store is about to be read (store/db.py)."""
        self.db.expect_reads()

    def applied_offsets(self) -> dict[str, int]:
        """The committed "topic:N" -> next offset to apply."""
        return self.db.applied_offsets()

    # -- the transaction ----------------------------------------------------------

    def commit(self, offsets: Offsets, changes: Changes | None = None) -> None:
        """Write the overlay and the applied `offsets` in one atomic WriteBatch.

        Args:
            offsets: "topic:N" -> next offset to apply; merged into the stored ones
                (partitions not mentioned keep their value).
            changes: `changes()` as taken since the last write to the overlay (the
                changelog written in this transaction): written as they are, so each
                changed value is encoded once, not once for the changelog and again here.

        Raises:
            ValueError: a malformed partition name or offset (nothing is written).
            StoreError: the store is closed or RocksDB refused the write (the overlay
                is kept, so the caller may retry or abort).
        """
        self.db.check_open()
        overlay = self.overlay
        overlay.settle()
        batch = rocksdict.WriteBatch(raw_mode=True)
        for raw_key, raw in encode_offsets(offsets):
            batch.put(raw_key, raw)
        if changes is None or len(changes) != len(overlay.entries):
            add_to_batch(batch, overlay.entries)
        else:
            _put_changes(batch, changes)
        if batch.len():
            self.db.write(batch)
        overlay.drop()

    def abort(self) -> None:
        """Drop every uncommitted write."""
        self.overlay.drop()

    def changes(self) -> Changes:
        """The open transaction's writes, one per key: the last value written, encoded
        as the store keeps it (None: deleted). A changelog batch: whatever a record
        wrote and then overwrote or deleted inside the transaction is not in it.

        In key order: RocksDB's memtable inserts keys in order cheaper than in a random
        order (it keeps where its last insert went, so the next one searches little:
        docs/performance.md, "Measurements behind the code"), for this store's
        commit and for every replica applying the changelog."""
        self.overlay.settle()
        return overlay_changes(self.overlay.entries)

    def sweep_expired(self, before: int, start: bytes, limit: int) -> bytes | None:
        """Delete, in the open transaction, the committed entries whose expiry is at or
        before `before` (store/expiry.py), looking at `limit` committed entries from
        encoded key `start` on; entries the transaction holds are left to it.

        Args:
            before: stream time no later record can be behind (the caller's bound).
            start: where this slice starts (b"": the first data key).
            limit: how many committed entries to look at.

        Returns:
            Where the next slice starts, or None once the end was reached.

        Raises:
            StoreError: the store is closed, or a damaged block was read.
        """
        self.db.check_open()
        entries, log = self.overlay.entries, self.overlay.undo
        seen = 0
        for raw_key, raw in self.db.scan(max(start, BYTES_TAG), DATA_END):
            if seen >= limit:
                return raw_key
            seen += 1
            if raw[:1] == EXPIRING_TAG and (expiry_of(raw) or 0) <= before:
                key = decode_key(raw_key)
                if key not in entries:
                    if log is not None:
                        log.append((key, ABSENT))
                    entries[key] = DELETED
        return None

    # -- the changelog and bulk loads -----------------------------------------------

    def snapshot(self) -> Iterator[Change]:
        """The whole state (open transaction included) as changelog records, in key
        order: what a changelog that never saw this store's history must start with."""
        yield from merged(self.db, self.overlay.entries)

    def apply_changes(self, changes: Iterable[Change], offsets: Offsets) -> None:
        """`apply_records` of (encoded key, encoded value or None) pairs, as `changes()`
        and `snapshot()` give them."""
        changes = changes if isinstance(changes, list) else list(changes)
        self.apply_records(list(map(_KEY_OF, changes)), list(map(_VALUE_OF, changes)),
                           offsets)

    def apply_records(self, keys: Sequence[bytes], values: Sequence[bytes | None],
                      offsets: Offsets) -> None:
        """Write changelog records and the applied `offsets` in one atomic WriteBatch.

        Args:
            keys, values: the records' encoded keys and values (None: a delete), as
                two columns: a changelog apply is a per-record hot path, and columns
                are put without a Python step per record. Applied in order, so a later
                record of a key wins.
            offsets: "topic:N" -> next offset, written after the records (for a
                replica: the changelog position T2).

        Raises:
            ValueError: a record whose key is neither a state key nor an applied offset,
                or an offset record without a valid offset (nothing is written).
            StoreError: uncommitted writes are pending, the store is closed, or RocksDB
                refused the write.
        """
        self.db.check_open()
        self._check_no_writes("apply changelog records to")
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        for i in rare_keys(keys):
            if check_changelog_key(keys[i]).startswith(OFFSET_PREFIX):
                changelog_offset(keys[i], values[i])    # raises on a malformed offset
        batch = rocksdict.WriteBatch(raw_mode=True)
        put, delete = batch.put, batch.delete
        if None in values:                          # deletes: record by record, in order
            for raw_key, raw in zip(keys, values, strict=True):
                if raw is None:
                    delete(raw_key)
                else:
                    put(raw_key, raw)
        else:
            deque(map(put, keys, values), maxlen=0)
        for raw_key, raw in encode_offsets(offsets):
            put(raw_key, raw)
        if batch.len():
            self.db.write(batch)

    def clear(self) -> None:
        """Delete every key and applied offset in one atomic write (uncommitted writes
        too): the store is a cache, about to be rebuilt from a changelog.

        Raises:
            StoreError: the store is closed or RocksDB refused the write.
        """
        self.db.check_open()
        self.overlay.drop()
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.delete_range(META_PREFIX, DATA_END)
        self.db.write(batch)

    def ingest(self, sst_paths: Sequence[str | os.PathLike[str]], *,
               move: bool = False) -> None:
        """Ingest SST files from `write_sst`: their data and offsets land in one step.

        Ingested values override older ones of the same keys; among the files, a later
        one overrides an earlier one; later commits override ingested values.

        Args:
            sst_paths: files written by `write_sst`.
            move: link (or move) the files into the store instead of copying them.

        Raises:
            StoreError: uncommitted writes are pending, or RocksDB refused the files.
        """
        self.db.check_open()
        self._check_no_writes("ingest into")
        if sst_paths:
            self.db.ingest([str(p) for p in sst_paths], move)

    def ingest_items(self, items: Iterable[tuple[Key, Any]], offsets: Offsets) -> None:
        """Bulk-load `items` and `offsets` through a temporary SST (see `ingest`)."""
        items = list(items)
        if not items and not offsets:
            return
        with tempfile.TemporaryDirectory(prefix="baton-ingest-") as tmp:
            sst = Path(tmp) / "items.sst"
            write_sst(sst, items, offsets)
            self.ingest([sst], move=True)

    def _check_no_writes(self, what: str) -> None:
        """Refuse a load while the open transaction holds writes (it would be lost or
        would override what is loaded)."""
        self.overlay.settle()
        if self.overlay.entries:
            raise StoreError(self.db.path, (
                f"cannot {what} task store {self.db.path} with "
                f"{len(self.overlay.entries)} uncommitted writes: commit or abort them "
                "first"))

    # -- lifecycle ------------------------------------------------------------------

    def approximate_bytes(self) -> int:
        """Size of the store's files on disk (0 once destroyed)."""
        return self.db.approximate_bytes()

    def close(self) -> None:
        """Close the store, dropping uncommitted writes; idempotent."""
        if not self.db.closed:
            self.overlay.close()
            self.db.close()

    def destroy(self) -> None:
        """Close the store and remove its directory."""
        self.close()
        self.db.destroy()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _put_changes(batch: rocksdict.WriteBatch, changes: Changes) -> None:
    """Encoded changes into `batch`, in order; without a Python step per change when
    none is a delete."""
    if None not in changes.raw_values:
        deque(map(batch.put, changes.raw_keys, changes.raw_values), maxlen=0)
        return
    put, delete = batch.put, batch.delete
    for raw_key, raw in changes:
        if raw is None:
            delete(raw_key)
        else:
            put(raw_key, raw)


if TYPE_CHECKING:
    _conforms: type[Store] = TaskStore
