"""Bulk ingest files: sorted state plus applied offsets in one SST.

`write_sst` needs no open store, only this module, rocksdict and orjson, so a Spark
executor on another host can build a task's state and ship the file to the processor,
whose `TaskStore.ingest` then lands data and offsets (T2) in one step.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import rocksdict

from store.base import Offsets
from store.codec import Key, encode_key, encode_offsets, encode_value
from store.errors import StoreError
from store.options import sst_options

__all__ = ["write_encoded_sst", "write_sst"]


def write_sst(path: str | os.PathLike[str], items: Iterable[tuple[Key, Any]],
              offsets: Offsets) -> int:
    """Write `items` and the applied `offsets` into a new SST file at `path`.

    Items may come in any order (they are sorted by encoded key); when a key repeats,
    its last value wins.

    Args:
        path: the file to create (its directory must exist).
        items: (key, value) pairs; keys bytes or str, values JSON-able.
        offsets: "topic:N" -> next offset to apply, stored beside the data.

    Returns:
        The number of distinct data keys written.

    Raises:
        ValueError: nothing to write (no items and no offsets), or a bad offset.
        TypeError: a key or value that cannot be encoded.
        StoreError: RocksDB could not write the file.
    """
    entries = {encode_key(key): encode_value(value) for key, value in items}
    count = len(entries)
    entries.update(encode_offsets(offsets))
    if not entries:
        raise ValueError(f"write_sst({path}): no items and no offsets; nothing to write")
    _write_sorted(Path(path), entries)
    return count


def write_encoded_sst(path: str | os.PathLike[str], entries: Mapping[Key, bytes],
                      offsets: Offsets) -> int:
    """`write_sst` of values already encoded as the store keeps them (a fold's state):
    written as they are, so what only the store's encoding holds (an entry's expiry,
    store/expiry.py) reaches the store unchanged, and nothing is decoded to be encoded
    again.

    Returns:
        The number of data keys written.

    Raises:
        ValueError: nothing to write, or a bad offset.
        TypeError: a key that is not bytes or str.
        StoreError: RocksDB could not write the file.
    """
    raw = {encode_key(key): value for key, value in entries.items()}
    count = len(raw)
    raw.update(encode_offsets(offsets))
    if not raw:
        raise ValueError(f"write_encoded_sst({path}): no entries and no offsets; nothing "
                         "to write")
    _write_sorted(Path(path), raw)
    return count


def _write_sorted(path: Path, entries: dict[bytes, bytes]) -> None:
    writer = rocksdict.SstFileWriter(sst_options())
    try:
        writer.open(str(path))
        for key in sorted(entries):
            writer[key] = entries[key]
        writer.finish()
    except Exception as exc:
        path.unlink(missing_ok=True)
        raise StoreError(path, f"cannot write SST file {path}: {exc}") from exc
