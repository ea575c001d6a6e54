"""One task store's RocksDB database: opening it, reading its committed data, the
atomic writes and SST ingests the store makes, and its lifecycle (verify, checkpoint,
size, close, destroy).

It knows nothing of the open transaction (store/_overlay.py) or of the state mapping
(store/task_state.py): what it holds is committed.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn, cast

import rocksdict

from store.codec import DATA_END, OFFSET_END, OFFSET_PREFIX, decode_offset_item
from store.errors import StoreCorruptError, StoreError, open_error
from store.options import OPEN_OPTIONS, READ_OPTIONS, StoreMemory, db_options, write_options
from store.paths import prepare_db_dir

__all__ = ["StoreDb"]

log = logging.getLogger("baton.store")

# read ahead of a verifying scan: sequential reads of whole table files
_VERIFY_READAHEAD = 2 << 20


class StoreDb:
    """The open (or closed) RocksDB database of one task store.

    Args:
        path: the store's own directory (see `task_store_path`).
        sync: fsync the WAL on every commit (survives host crashes, much slower).
        reads: False for a store that is only written until `expect_reads` (a
            changelog replica): its memtable then keeps no Bloom filter.
        memory: the memory and open-file budget (default: `StoreMemory()`'s).
        wal: write commits through the write-ahead log (store/options.py).

    Raises:
        StoreLockedError: another process holds the store.
        StoreCorruptError: the store's files are damaged (they are left untouched).
        StoreError: `path` is a file, not creatable, not writable, or other failures.
    """

    __slots__ = ("path", "raw", "closed", "_write_opts", "_reads", "__weakref__")

    def __init__(self, path: str | os.PathLike[str], *, sync: bool = False,
                 reads: bool = True, memory: StoreMemory | None = None,
                 wal: bool = True) -> None:
        self.path = Path(path)
        create = prepare_db_dir(self.path)
        try:
            # the rocksdict handle itself: the state mapping's reads call it directly
            self.raw = rocksdict.Rdict(str(self.path), db_options(create, reads, memory))
        except Exception as exc:
            raise open_error(self.path, exc) from exc
        try:
            self.raw.set_options(OPEN_OPTIONS)
        except Exception as exc:
            self.raw.close()
            raise open_error(self.path, exc) from exc
        self.closed = False
        self._reads = reads
        self._write_opts = write_options(sync, wal)

    def expect_reads(self) -> None:
        """The store is about to be read (its task goes active): memtables made from
        now on keep a Bloom filter again (the current one has none; a read of it is
        only slower).

        Raises:
            StoreError: the store is closed or RocksDB refused the options.
        """
        if self._reads:
            return
        self.check_open()
        try:
            self.raw.set_options(READ_OPTIONS)
        except Exception as exc:
            raise StoreError(self.path, f"task store {self.path}: {exc}") from exc
        self._reads = True

    # -- reads of the committed data ----------------------------------------------

    def applied_offsets(self) -> dict[str, int]:
        """The committed "topic:N" -> next offset to apply."""
        self.check_open()
        read_opts = rocksdict.ReadOptions()
        read_opts.set_iterate_upper_bound(OFFSET_END)
        stored = self.raw.items(from_key=OFFSET_PREFIX, read_opt=read_opts)
        return dict(decode_offset_item(k, v) for k, v
                    in cast("Iterator[tuple[bytes, bytes]]", stored))

    def scan(self, start: bytes, end: bytes = DATA_END) -> Iterator[tuple[bytes, bytes]]:
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
                                self.raw.items(from_key=start, read_opt=read_opts)):
            yield last, value
        check = rocksdict.ReadOptions()
        check.set_iterate_upper_bound(end)
        probe = self.raw.iter(check)
        try:
            if last is None:
                probe.seek(start)
            else:
                probe.seek(last)
                if probe.valid():
                    probe.next()
            if probe.valid():
                raise StoreCorruptError(self.path, (
                    f"task store {self.path} is corrupt: a scan stopped at "
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
            return StoreError(self.path, f"cannot read task store {self.path}: {exc}")
        return StoreCorruptError(self.path, f"task store {self.path} is corrupt: {exc}")

    def verify(self) -> int:
        """Read every key with block checksums verified: RocksDB checks a table file's
        data blocks only when it reads them, not at open, so bytes damaged on disk would
        otherwise be found (or served) later. Returns the number of keys read.

        Raises:
            StoreCorruptError: a block's checksum does not match (the message names
                the file and offset).
            StoreError: the store is closed.
        """
        self.check_open()
        read_opts = rocksdict.ReadOptions()
        read_opts.set_verify_checksums(True)
        read_opts.fill_cache(False)         # a scan must not evict the hot blocks
        read_opts.set_readahead_size(_VERIFY_READAHEAD)
        count = 0
        # the raw iterator, not keys(): rocksdict's keys()/items() end quietly where an
        # error invalidates the iterator; only status() tells a damaged block
        scan = self.raw.iter(read_opts)
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

    # -- writes -----------------------------------------------------------------------

    def write(self, batch: rocksdict.WriteBatch) -> None:
        """Write `batch` atomically, durable as the store's options say.

        Raises:
            StoreError: RocksDB refused the write (a full disk, a closed store).
        """
        try:
            self.raw.write(batch, self._write_opts)
        except Exception as exc:
            raise StoreError(self.path, f"commit to task store {self.path} failed: {exc}"
                             ) from exc

    def ingest(self, files: list[str], move: bool) -> None:
        """Ingest SST files: their data gets a sequence number above everything already
        in the store, so it overrides older values; later writes override it.

        Raises:
            StoreError: RocksDB refused the files.
        """
        opts = rocksdict.IngestExternalFileOptions()
        opts.set_move_files(move)
        opts.set_allow_global_seqno(True)  # the files' data gets a seqno above all existing
        opts.set_allow_blocking_flush(True)  # flush an overlapping memtable first
        try:
            self.raw.ingest_external_file(files, opts)
        except Exception as exc:
            raise StoreError(self.path, (
                f"cannot ingest {', '.join(files)} into task store {self.path}: {exc}"
            )) from exc

    # -- lifecycle ------------------------------------------------------------------

    def checkpoint(self, dest: str | os.PathLike[str]) -> None:
        """Write a consistent copy of the committed state to new directory `dest`."""
        self.check_open()
        try:
            rocksdict.Checkpoint(self.raw).create_checkpoint(str(dest))
        except Exception as exc:
            raise StoreError(self.path, (
                f"cannot checkpoint task store {self.path} to {dest}: {exc}")) from exc

    def approximate_bytes(self) -> int:
        """Size of the store's files on disk (0 once destroyed)."""
        try:
            with os.scandir(self.path) as entries:
                return sum(e.stat().st_size for e in entries if e.is_file())
        except FileNotFoundError:
            return 0

    def close(self) -> None:
        """Close the database; idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self.raw.close()
        except Exception as exc:  # noqa: BLE001 - nothing for a caller to do about it
            # a database that failed a write (a full disk) refuses to flush on close;
            # what it committed is in its write-ahead log, which the next open
            # replays, so the store is only closed, never lost or ahead
            log.warning("task store %s: closed after an error: %s", self.path, exc)

    def destroy(self) -> None:
        """Close the database and remove its directory."""
        self.close()
        if self.path.exists():
            shutil.rmtree(self.path)

    def check_open(self) -> None:
        """Raise StoreError once the store is closed."""
        if self.closed:
            self.raise_closed()

    def raise_closed(self) -> NoReturn:
        """The StoreError of a closed store (a read RocksDB refused as closed)."""
        raise StoreError(self.path, f"task store {self.path} is closed")
