"""SST ingest into a task store: a bulk result (the Spark path) lands in one step.

The ingested file gets a sequence number above everything already in the store, so it
overrides older values; later commits get higher numbers and override it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import rocksdict

from store.base import Offsets
from store.codec import Key
from store.errors import StoreError
from store.sst import write_sst
from store.writes import StoreWrites

__all__ = ["StoreIngest"]


class StoreIngest(StoreWrites):
    """Bulk loads of SST files into a task store."""

    __slots__ = ()

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
