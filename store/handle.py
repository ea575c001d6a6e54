"""A task store's handle on its RocksDB database: the attributes every part of the
store shares, what it reads of the committed data, and its lifecycle (checkpoint, size,
close, destroy).

`TaskStore` (store/rocksdb.py) is built in layers, one module each: this handle, the
writes (store/writes.py: the transaction, changelog records), SST ingest
(store/ingest.py) and, on top, the state mapping, the per-record hot path.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, Self, cast

import rocksdict

from store._overlay import merge, overlay_changes
from store.codec import BYTES_TAG, DATA_END, OFFSET_END, OFFSET_PREFIX, Key, decode_offset_item
from store.errors import StoreCorruptError, StoreError
from store.options import READ_OPTIONS
from store.state import StreamClock

__all__ = ["ClosedLog", "StoreHandle"]

log = logging.getLogger("baton.store")

# read ahead of a verifying scan: sequential reads of whole table files
_VERIFY_READAHEAD = 2 << 20


class StoreHandle:
    """The open (or closed) database of one task store and its transaction overlay."""

    __slots__ = ("_path", "_db", "_write_opts", "_overlay", "_bases", "_undo", "_closed",
                 "_reads", "_clock", "__weakref__")

    _path: Path
    _db: rocksdict.Rdict
    _write_opts: rocksdict.WriteOptions
    _overlay: dict[Key, Any]
    _bases: dict[Key, bytes]         # committed encodings of live values read
    _undo: list[tuple[Key, Any]] | None      # None: no undo log kept
    _closed: bool
    _reads: bool
    _clock: StreamClock              # stream time: the record being processed

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

    # -- reads of the committed data ----------------------------------------------

    def applied_offsets(self) -> dict[str, int]:
        """The committed "topic:N" -> next offset to apply."""
        self._check_open()
        read_opts = rocksdict.ReadOptions()
        read_opts.set_iterate_upper_bound(OFFSET_END)
        stored = self._db.items(from_key=OFFSET_PREFIX, read_opt=read_opts)
        return dict(decode_offset_item(k, v) for k, v
                    in cast("Iterator[tuple[bytes, bytes]]", stored))

    def _merged(self) -> Iterator[tuple[bytes, bytes]]:
        """Committed data merged with a snapshot of the overlay, in encoded-key order."""
        self._check_open()
        pending = overlay_changes(self._overlay)
        return merge(pending, self._scan(BYTES_TAG, DATA_END))

    def _scan(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The committed entries in [start, end), raising at a damaged block.

        rocksdict's items() ends quietly where a read error invalidates its iterator,
        which would pass a damaged store off as a smaller one (a state silently
        missing keys). So once it ends, one raw iterator is placed after the last key
        it gave: anything there, or an error status, means the scan stopped early.

        Raises:
            StoreCorruptError: a block could not be read (the message names the file).
            StoreError: another read error.
        """
        read_opts = rocksdict.ReadOptions()
        read_opts.set_iterate_upper_bound(end)
        last: bytes | None = None
        for last, value in cast("Iterator[tuple[bytes, bytes]]",
                                self._db.items(from_key=start, read_opt=read_opts)):
            yield last, value
        check = rocksdict.ReadOptions()
        check.set_iterate_upper_bound(end)
        probe = self._db.iter(check)
        try:
            if last is None:
                probe.seek(start)
            else:
                probe.seek(last)
                if probe.valid():
                    probe.next()
            if probe.valid():
                raise StoreCorruptError(self._path, (
                    f"task store {self._path} is corrupt: a scan stopped at "
                    f"{last!r} while more keys follow"))
            probe.status()
        except StoreError:
            raise
        except Exception as exc:
            raise self._read_error(exc) from exc
        finally:
            del probe           # a live iterator keeps the database open past close()

    def _read_error(self, exc: Exception) -> StoreError:
        """The StoreError for a failed read: StoreCorruptError for a damaged block."""
        if "Corruption" not in str(exc):
            return StoreError(self._path, f"cannot read task store {self._path}: {exc}")
        return StoreCorruptError(self._path, f"task store {self._path} is corrupt: {exc}")

    def verify(self) -> int:
        """Read every key with block checksums verified: RocksDB checks a table file's
        data blocks only when it reads them, not at open, so bytes damaged on disk would
        otherwise be found (or served) later. Returns the number of keys read.

        Raises:
            StoreCorruptError: a block's checksum does not match (the message names
                the file and offset).
            StoreError: the store is closed.
        """
        self._check_open()
        read_opts = rocksdict.ReadOptions()
        read_opts.set_verify_checksums(True)
        read_opts.fill_cache(False)         # a scan must not evict the hot blocks
        read_opts.set_readahead_size(_VERIFY_READAHEAD)
        count = 0
        # the raw iterator, not keys(): rocksdict's keys()/items() end quietly where an
        # error invalidates the iterator; only status() tells a damaged block
        scan = self._db.iter(read_opts)
        valid, step = scan.valid, scan.next
        try:
            scan.seek_to_first()
            while valid():
                step()
                count += 1
            scan.status()
        except Exception as exc:
            raise self._read_error(exc) from exc
        finally:
            # a live iterator keeps the database (and its LOCK) open past close()
            del scan, valid, step
        return count

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
        self._undo = ClosedLog(self._path)
        try:
            self._db.close()
        except Exception as exc:  # noqa: BLE001 - nothing for a caller to do about it
            # a database that failed a write (a full disk) refuses to flush on close;
            # what it committed is in its write-ahead log, which the next open
            # replays, so the store is only closed, never lost or ahead
            log.warning("task store %s: closed after an error: %s", self._path, exc)

    def destroy(self) -> None:
        """Close the store and remove its directory."""
        self.close()
        if self._path.exists():
            shutil.rmtree(self._path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            self._raise_closed()

    def _raise_closed(self) -> NoReturn:
        raise StoreError(self._path, f"task store {self._path} is closed")


class ClosedLog(list[tuple[Key, Any]]):
    """The undo log of a closed store: any write fails at no cost to the open path."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._path = path

    def append(self, item: tuple[Key, Any]) -> None:
        raise StoreError(self._path, f"task store {self._path} is closed")

