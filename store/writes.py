"""A task store's writes: the transaction over the overlay (a record's undo log, the
commit of the overlay with the applied offsets in one WriteBatch, abort), changelog
records applied as they are, the sweep of expired entries nothing reads any more, and
clearing the store to rebuild it.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Iterable, Iterator, Sequence

import rocksdict

from store._overlay import ABSENT, DELETED, add_to_batch, overlay_changes, settle, undo
from store.base import Change, Changes, Offsets
from store.codec import (
    BYTES_TAG,
    DATA_END,
    META_PREFIX,
    OFFSET_PREFIX,
    changelog_offset,
    check_changelog_key,
    decode_key,
    encode_offsets,
    rare_keys,
)
from store.errors import StoreError
from store.expiry import EXPIRING_TAG, expiry_of
from store.handle import StoreHandle

__all__ = ["StoreWrites"]

_KEY_OF = operator.itemgetter(0)
_VALUE_OF = operator.itemgetter(1)


class StoreWrites(StoreHandle):
    """What a task store writes, always in one atomic WriteBatch."""

    __slots__ = ()

    def begin_record(self) -> None:
        """Start the undo log of one record (the previous record's writes stay).

        From the first call on, every write also appends to the undo log.
        """
        if self._undo is None:
            self._undo = []
        else:
            self._undo.clear()

    def rollback_record(self) -> None:
        """Undo the overlay writes made since `begin_record` (and not yet committed).

        Raises:
            StoreError: `begin_record` was never called, so there is no undo log.
        """
        if self._undo is None:
            raise StoreError(self._path, (
                f"rollback_record() on task store {self._path} without begin_record(): "
                "call begin_record() before each record that may be rolled back"))
        undo(self._overlay, self._undo)
        self._undo.clear()

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
        self._check_open()
        self._settle()
        batch = rocksdict.WriteBatch(raw_mode=True)
        for raw_key, raw in encode_offsets(offsets):
            batch.put(raw_key, raw)
        if changes is None or len(changes) != len(self._overlay):
            add_to_batch(batch, self._overlay)
        else:
            _put_changes(batch, changes)
        if batch.len():
            self._write(batch)
        self._overlay = {}
        self._bases = {}
        if self._undo is not None:
            self._undo.clear()

    def _settle(self) -> None:
        """Encode the live values; drop those that hold what RocksDB holds already."""
        try:
            settle(self._overlay, self._bases)
        except TypeError as exc:
            raise StoreError(self._path, (
                f"task store {self._path}: {exc}; a list or dict read from the state was "
                "changed in place to hold something JSON cannot (a set, a tuple key, an "
                "object): store only JSON values")) from exc

    def _write(self, batch: rocksdict.WriteBatch) -> None:
        try:
            self._db.write(batch, self._write_opts)
        except Exception as exc:
            raise StoreError(self._path, f"commit to task store {self._path} failed: {exc}"
                             ) from exc

    def changes(self) -> Changes:
        """The open transaction's writes, one per key: the last value written, encoded
        as the store keeps it (None: deleted). A changelog batch: whatever a record
        wrote and then overwrote or deleted inside the transaction is not in it.

        In key order: RocksDB's memtable inserts keys in order cheaper than in a random
        order (it keeps where its last insert went, so the next one searches little:
        docs/performance.md, "Measurements behind the code"), for this store's
        commit and for every replica applying the changelog."""
        self._settle()
        return overlay_changes(self._overlay)

    def snapshot(self) -> Iterator[Change]:
        """The whole state (open transaction included) as changelog records, in key
        order: what a changelog that never saw this store's history must start with."""
        yield from self._merged()

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
        self._check_open()
        self._settle()
        if self._overlay:
            raise StoreError(self._path, (
                f"cannot apply changelog records to task store {self._path} with "
                f"{len(self._overlay)} uncommitted writes: commit or abort them first"))
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
            self._write(batch)

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
        self._check_open()
        overlay, log = self._overlay, self._undo
        seen = 0
        for raw_key, raw in self._scan(max(start, BYTES_TAG), DATA_END):
            if seen >= limit:
                return raw_key
            seen += 1
            if raw[:1] == EXPIRING_TAG and (expiry_of(raw) or 0) <= before:
                key = decode_key(raw_key)
                if key not in overlay:
                    if log is not None:
                        log.append((key, ABSENT))
                    overlay[key] = DELETED
        return None

    def clear(self) -> None:
        """Delete every key and applied offset in one atomic write (uncommitted writes
        too): the store is a cache, about to be rebuilt from a changelog.

        Raises:
            StoreError: the store is closed or RocksDB refused the write.
        """
        self._check_open()
        self.abort()
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.delete_range(META_PREFIX, DATA_END)
        self._write(batch)

    def abort(self) -> None:
        """Drop every uncommitted write."""
        self._overlay = {}
        self._bases = {}
        if self._undo is not None:
            self._undo.clear()


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
