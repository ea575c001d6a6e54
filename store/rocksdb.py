"""The RocksDB task store: one rocksdict database per task, with a transaction overlay.

Theory of operation
-------------------
* The overlay is a dict from the caller's key (exact bytes or str) to an entry (see
  store/_overlay.py): scalars as they are, containers encoded at write time (so values
  have copy semantics, as if read from RocksDB), DELETED for deletes.
* Keys are encoded (type tag + bytes) only when a read misses the overlay and at commit.
* The undo log holds (key, previous entry) per write: one append. Rolling a record
  back restores those entries in reverse; RocksDB itself is never touched. It exists
  only once `begin_record` has been called: the default on_error policy ("fail")
  aborts the whole transaction instead, and then pays nothing for it.
* `commit(offsets)` writes the overlay and the applied offsets in one WriteBatch (see
  store/options.py for durability), then empties the overlay.
* SST ingest gives the ingested file a sequence number above everything already in the
  store, so it overrides older values; later commits get higher numbers and override it.

The mapping methods are the per-record hot path: they are kept flat (no helper layers,
module-level aliases for the C functions they call).
"""

from __future__ import annotations

import operator
import os
import shutil
import tempfile
from collections import deque
from collections.abc import ItemsView, Iterable, Iterator, MutableMapping, Sequence, ValuesView
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, cast

import orjson
import rocksdict

from store._overlay import (
    ABSENT,
    DELETED,
    LIVE,
    add_to_batch,
    freeze,
    merge,
    overlay_changes,
    settle,
    undo,
)
from store.base import Change, Changes, Offsets
from store.codec import (
    BYTES_TAG,
    DATA_END,
    META_PREFIX,
    OFFSET_END,
    OFFSET_PREFIX,
    STR_TAG,
    Key,
    changelog_offset,
    check_changelog_key,
    decode_key,
    decode_offset_item,
    decode_value,
    encode_key,
    encode_offsets,
    encode_value,
    rare_keys,
)
from store.errors import StoreError, open_error
from store.options import READ_OPTIONS, db_options, write_options
from store.paths import prepare_db_dir
from store.sst import write_sst

_KEY_OF = operator.itemgetter(0)
_VALUE_OF = operator.itemgetter(1)

if TYPE_CHECKING:
    from store.base import Store

__all__ = ["TaskStore"]

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_DbClosedError = rocksdict.DbClosedError
_NoneType = type(None)
_LIVE = LIVE


class TaskStore(MutableMapping[Key, Any]):
    """One task's state: a MutableMapping over RocksDB with a transaction overlay."""

    __slots__ = ("_path", "_db", "_write_opts", "_overlay", "_bases", "_undo", "_closed",
                 "_reads", "__weakref__")

    def __init__(self, path: str | os.PathLike[str], *, sync: bool = False,
                 reads: bool = True) -> None:
        """Open (or create) the store in directory `path`.

        Args:
            path: the store's own directory (see `task_store_path`).
            sync: fsync the WAL on every commit (survives host crashes, much slower).
            reads: False for a store that is only written until `expect_reads` (a
                changelog replica): its memtable then keeps no Bloom filter.

        Raises:
            StoreLockedError: another process holds the store.
            StoreCorruptError: the store's files are damaged (they are left untouched).
            StoreError: `path` is a file, not creatable, not writable, or other failures.
        """
        self._path = Path(path)
        create = prepare_db_dir(self._path)
        try:
            self._db = rocksdict.Rdict(str(self._path), db_options(create, reads))
        except Exception as exc:
            raise open_error(self._path, exc) from exc
        self._reads = reads
        self._write_opts = write_options(sync)
        self._overlay: dict[Key, Any] = {}
        self._bases: dict[Key, bytes] = {}  # committed encodings of live values read
        self._undo: list[tuple[Key, Any]] | None = None  # None: no undo log kept
        self._closed = False

    @property
    def path(self) -> Path:
        """The store's directory."""
        return self._path

    def expect_reads(self) -> None:
        """The store is about to be read (its task goes active): memtables made from
        now on keep a Bloom filter again (the current one has none; a read of it is
        only slower).

        Raises:
            StoreError: the store is closed or RocksDB refused the options.
        """
        if self._reads:
            return
        self._check_open()
        try:
            self._db.set_options(READ_OPTIONS)
        except Exception as exc:
            raise StoreError(self._path, f"task store {self._path}: {exc}") from exc
        self._reads = True

    @property
    def state(self) -> MutableMapping[Key, Any]:
        """The mapping a job's `process()` reads and writes: this store itself."""
        return self

    def __repr__(self) -> str:
        return f"TaskStore({str(self._path)!r})"

    # -- the state mapping: the hot path ---------------------------------------------

    def __getitem__(self, key: Key) -> Any:
        entry = self._overlay.get(key, ABSENT)
        if entry is ABSENT:
            raw = self._stored(key)
            if raw is None:
                raise KeyError(key)
        elif entry.__class__ is not bytes:
            if entry is DELETED:
                raise KeyError(key)
            if self._undo is not None and entry.__class__ in _LIVE:
                self._undo.append((key, freeze(entry)))
            return entry
        else:
            raw = entry
        try:
            value = _loads(raw)
        except _JSONDecodeError:
            value = decode_value(raw)
        if value.__class__ in _LIVE:
            self._adopt(key, value, raw, entry)
        return value

    def get(self, key: Key, default: Any = None) -> Any:
        entry = self._overlay.get(key, ABSENT)
        if entry is ABSENT:  # `_stored`, inlined: most reads of a record's key land here
            cls = key.__class__
            raw_key = (BYTES_TAG + key if cls is bytes  # type: ignore[operator]
                       else STR_TAG + key.encode() if cls is str  # type: ignore[union-attr]
                       else encode_key(key))
            try:
                raw = self._db.get(raw_key)
            except _DbClosedError:
                self._raise_closed()
            if raw is None:
                return default
        elif entry.__class__ is not bytes:
            if entry is DELETED:
                return default
            if self._undo is not None and entry.__class__ in _LIVE:
                self._undo.append((key, freeze(entry)))
            return entry
        else:
            raw = entry
        try:
            value = _loads(raw)
        except _JSONDecodeError:
            value = decode_value(raw)
        if value.__class__ in _LIVE:      # `_adopt`, inlined: a dict job's every read
            if key.__class__ is not bytes and key.__class__ is not str:
                key = _normalise_key(key)
            if self._undo is not None:
                self._undo.append((key, entry))
            if entry is ABSENT:
                self._bases[key] = raw
            self._overlay[key] = value
        return value

    def _adopt(self, key: Key, value: Any, raw: bytes, entry: Any) -> None:
        """Make `value`, a list or dict just decoded from `raw`, the key's live value:
        later reads return this same object and the commit writes what it then holds
        (not at all if that is what RocksDB holds already, `raw` when `entry` is ABSENT).
        The undo log gets the entry it replaces, so a rolled-back record's in-place
        changes are undone with its writes."""
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise_key(key)
        if self._undo is not None:
            self._undo.append((key, entry))
        if entry is ABSENT:
            self._bases[key] = raw
        self._overlay[key] = value

    def setdefault(self, key: Key, default: Any = None) -> Any:
        """`dict.setdefault`: what it returns is the stored value itself (a list or dict
        given as `default` is kept as it is, so mutating it is writing to the state)."""
        try:
            return self[key]
        except KeyError:
            self[key] = default
        return self[key]

    def __setitem__(self, key: Key, value: Any) -> None:
        cls = key.__class__
        if cls is not bytes and cls is not str:
            key = _normalise_key(key)
        cls = value.__class__
        if cls is not int and cls is not str and cls is not bool and cls is not _NoneType:
            if cls is list or cls is dict:
                # refuses what JSON cannot hold, here; a value read back and assigned
                # again (`v = state[k]; ...; state[k] = v`) is checked at the commit
                if self._overlay.get(key) is not value:
                    encode_value(value)
            else:
                value = freeze(value)
        if self._undo is not None:
            self._undo.append((key, self._overlay.get(key, ABSENT)))
        self._overlay[key] = value

    def __delitem__(self, key: Key) -> None:
        if not self.contains(key):
            raise KeyError(key)
        self.delete(key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes | str) and self.contains(key)

    def __iter__(self) -> Iterator[Key]:
        for raw_key, _ in self._merged():
            yield decode_key(raw_key)

    def __len__(self) -> int:
        return sum(1 for _ in self._merged())

    def items(self) -> ItemsView[Key, Any]:
        """Ordered (key, value) pairs in one pass (no lookup per key)."""
        return _ItemsView(self)

    def values(self) -> ValuesView[Any]:
        """Values in key order, in one pass."""
        return _ValuesView(self)

    def put(self, key: Key, value: Any) -> None:
        """`store[key] = value`."""
        self[key] = value

    def delete(self, key: Key) -> None:
        """Delete `key` in the overlay; no error if it does not exist."""
        key = _normalise_key(key)
        if self._undo is not None:
            self._undo.append((key, self._overlay.get(key, ABSENT)))
        self._overlay[key] = DELETED

    def contains(self, key: Key) -> bool:
        """Whether `key` has a value, counting uncommitted writes and deletes."""
        entry = self._overlay.get(key, ABSENT)
        if entry is ABSENT:
            return self._stored(key) is not None
        return entry is not DELETED

    def _stored(self, key: Key) -> bytes | None:
        """The committed encoded value of `key`, or None."""
        if key.__class__ is bytes:
            raw_key = BYTES_TAG + key
        elif key.__class__ is str:
            raw_key = STR_TAG + key.encode()
        else:
            raw_key = encode_key(key)
        try:
            return cast("bytes | None", self._db.get(raw_key))
        except _DbClosedError:
            self._raise_closed()

    def iter_items(self) -> Iterator[tuple[Key, Any]]:
        """(key, value) in encoded-key order: all bytes keys, then all str keys."""
        overlay = self._overlay
        for raw_key, raw in self._merged():
            key = decode_key(raw_key)
            entry = overlay.get(key, ABSENT)
            if entry.__class__ in _LIVE:
                if self._undo is not None:
                    self._undo.append((key, freeze(entry)))
                yield key, entry
                continue
            value = decode_value(raw)
            if value.__class__ in _LIVE:
                self._adopt(key, value, raw, entry)
            yield key, value

    def _merged(self) -> Iterator[tuple[bytes, bytes]]:
        """Committed data merged with a snapshot of the overlay, in encoded-key order."""
        self._check_open()
        pending = overlay_changes(self._overlay)
        read_opts = rocksdict.ReadOptions()
        read_opts.set_iterate_upper_bound(DATA_END)
        stored = self._db.items(from_key=BYTES_TAG, read_opt=read_opts)
        return merge(pending, cast("Iterator[tuple[bytes, bytes]]", stored))

    # -- the transaction --------------------------------------------------------------

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
        order (1.07 against 1.50 us a key into a memtable of 500,000 keys, measured),
        for this store's commit and for every replica applying the changelog."""
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

    def applied_offsets(self) -> dict[str, int]:
        """The committed "topic:N" -> next offset to apply."""
        self._check_open()
        read_opts = rocksdict.ReadOptions()
        read_opts.set_iterate_upper_bound(OFFSET_END)
        stored = self._db.items(from_key=OFFSET_PREFIX, read_opt=read_opts)
        return dict(decode_offset_item(k, v) for k, v
                    in cast("Iterator[tuple[bytes, bytes]]", stored))

    # -- bulk ingest ----------------------------------------------------------------

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
        self._check_open()
        self._settle()
        if self._overlay:
            raise StoreError(self._path, (
                f"cannot ingest into task store {self._path} with {len(self._overlay)} "
                "uncommitted writes: commit or abort the open transaction first"))
        if sst_paths:
            self._ingest([str(p) for p in sst_paths], move)

    def _ingest(self, files: list[str], move: bool) -> None:
        opts = rocksdict.IngestExternalFileOptions()
        opts.set_move_files(move)
        opts.set_allow_global_seqno(True)  # the files' data gets a seqno above all existing
        opts.set_allow_blocking_flush(True)  # flush an overlapping memtable first
        try:
            self._db.ingest_external_file(files, opts)
        except Exception as exc:
            raise StoreError(self._path, (
                f"cannot ingest {', '.join(files)} into task store {self._path}: {exc}"
            )) from exc

    def ingest_items(self, items: Iterable[tuple[Key, Any]], offsets: Offsets) -> None:
        """Bulk-load `items` and `offsets` through a temporary SST (see `ingest`)."""
        items = list(items)
        if not items and not offsets:
            return
        with tempfile.TemporaryDirectory(prefix="baton-ingest-") as tmp:
            sst = Path(tmp) / "items.sst"
            write_sst(sst, items, offsets)
            self.ingest([sst], move=True)

    # -- lifecycle ------------------------------------------------------------------

    def checkpoint(self, dest: str | os.PathLike[str]) -> None:
        """Write a consistent copy of the committed state to new directory `dest`."""
        self._check_open()
        try:
            rocksdict.Checkpoint(self._db).create_checkpoint(str(dest))
        except Exception as exc:
            raise StoreError(self._path, (
                f"cannot checkpoint task store {self._path} to {dest}: {exc}")) from exc

    def approximate_bytes(self) -> int:
        """Size of the store's files on disk (0 once destroyed)."""
        try:
            with os.scandir(self._path) as entries:
                return sum(e.stat().st_size for e in entries if e.is_file())
        except FileNotFoundError:
            return 0

    def close(self) -> None:
        """Close the store, dropping uncommitted writes; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._overlay = {}
        # writes check `_undo` anyway; this one refuses them, so the open path pays
        # nothing for the closed check (reads fail in RocksDB, translated in `_stored`)
        self._undo = _ClosedLog(self._path)
        self._db.close()

    def destroy(self) -> None:
        """Close the store and remove its directory."""
        self.close()
        if self._path.exists():
            shutil.rmtree(self._path)

    def __enter__(self) -> TaskStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            self._raise_closed()

    def _raise_closed(self) -> NoReturn:
        raise StoreError(self._path, f"task store {self._path} is closed")


class _ClosedLog(list[tuple[Key, Any]]):
    """The undo log of a closed store: any write fails at no cost to the open path."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._path = path

    def append(self, item: tuple[Key, Any]) -> None:
        raise StoreError(self._path, f"task store {self._path} is closed")


class _ItemsView(ItemsView[Key, Any]):
    _mapping: TaskStore

    def __iter__(self) -> Iterator[tuple[Key, Any]]:
        return self._mapping.iter_items()


class _ValuesView(ValuesView[Any]):
    _mapping: TaskStore

    def __iter__(self) -> Iterator[Any]:
        return (value for _, value in self._mapping.iter_items())


def _normalise_key(key: Any) -> Key:
    """`key` as exactly bytes or str (subclasses, bytearray, memoryview converted)."""
    if isinstance(key, str):
        return str.__str__(key)
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    raise TypeError(f"state keys must be bytes or str, got {type(key).__name__}: {key!r}")


if TYPE_CHECKING:
    _conforms: type[Store] = TaskStore


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
