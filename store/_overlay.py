"""The transaction overlay's entries: what a write leaves in the overlay dict.

An entry is one of:

* a scalar (int, bool, None or str, exact types): the value itself. It is
  immutable, so sharing it with the caller is safe, and it is encoded only at commit,
  where the encoded bytes are freed right after the batch copies them;
* bytes: a container, a float (NaN must read back as the null it is stored as) or any
  other JSON-able object, encoded at write time, so a value
  read back is a fresh copy and mutating it in place changes nothing until it is
  assigned again, exactly as with a value read from RocksDB. State then does not depend
  on where commit boundaries fall, which replays (warmups, catch-up) rely on. (User
  values are never bytes: JSON has no bytes type.);
* DELETED: a delete.

The encoded container is copied into an exact-size object: orjson returns a bytes that
it over-allocated and shrank, and keeping thousands of those alive until commit
fragments the heap (measured at ~2 us per write on a VM with slow page faults).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import rocksdict

from store.codec import BYTES_TAG, STR_TAG, Key, encode_value

__all__ = ["ABSENT", "DELETED", "freeze", "entry_bytes", "add_to_batch", "merge", "overlay_changes",
           "undo"]


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


ABSENT: Any = _Sentinel("ABSENT")  # "not in the overlay" (the undo log uses it too)
DELETED: Any = _Sentinel("DELETED")  # a delete in the overlay

_dumps = orjson.dumps


def freeze(value: Any) -> bytes:
    """The entry of a non-scalar value: its encoding, in an exact-size bytes.

    Raises:
        TypeError: the value is not JSON-able.
    """
    return bytes(memoryview(encode_value(value)))


def entry_bytes(entry: Any) -> bytes | None:
    """The encoded value of an overlay entry, or None for a delete."""
    if entry is DELETED:
        return None
    if entry.__class__ is bytes:
        return entry
    return encode_value(entry)


def add_to_batch(batch: rocksdict.WriteBatch, overlay: dict[Key, Any]) -> None:
    """Put (or delete) every overlay entry into `batch`; keys are exact bytes or str.

    Per-entry work at commit: names are bound to locals.
    """
    put, dumps, bytes_tag, str_tag, deleted = batch.put, _dumps, BYTES_TAG, STR_TAG, DELETED
    for key, entry in overlay.items():
        if key.__class__ is bytes:
            raw_key = bytes_tag + key
        else:
            raw_key = str_tag + key.encode()  # type: ignore[union-attr]
        cls = entry.__class__
        if cls is bytes:
            put(raw_key, entry)
        elif entry is deleted:
            batch.delete(raw_key)
        else:  # a scalar: int, str, bool or None
            try:
                put(raw_key, dumps(entry))
            except TypeError:  # an int beyond 64 bits
                put(raw_key, encode_value(entry))


def overlay_changes(overlay: dict[Key, Any]) -> list[tuple[bytes, bytes | None]]:
    """Every overlay entry as (encoded key, encoded value or None for a delete): a
    changelog's records, encoded once at commit as `add_to_batch` does, without a
    function call per entry (an active task with a changelog pays this per changed key).

    The same encoding as `add_to_batch`, kept apart on purpose: a commit without a
    changelog building these pairs and then putting them measured 25% slower
    (`bench/store_write.py`: overlay/raw 0.74 -> 0.55).
    """
    out: list[tuple[bytes, bytes | None]] = []
    append, dumps, bytes_tag, str_tag, deleted = out.append, _dumps, BYTES_TAG, STR_TAG, DELETED
    for key, entry in overlay.items():
        if key.__class__ is bytes:
            raw_key = bytes_tag + key
        else:
            raw_key = str_tag + key.encode()  # type: ignore[union-attr]
        cls = entry.__class__
        if cls is bytes:
            append((raw_key, entry))
        elif entry is deleted:
            append((raw_key, None))
        else:  # a scalar: int, str, bool or None
            try:
                append((raw_key, dumps(entry)))
            except TypeError:  # an int beyond 64 bits
                append((raw_key, encode_value(entry)))
    return out


def undo(overlay: dict[Key, Any], log: list[tuple[Key, Any]]) -> None:
    """Restore the overlay entries recorded in `log`, newest first."""
    for key, previous in reversed(log):
        if previous is ABSENT:
            del overlay[key]
        else:
            overlay[key] = previous


def merge(pending: list[tuple[bytes, bytes | None]],
          stored: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
    """Merge sorted overlay entries over sorted stored ones; None entries hide keys."""
    i, n = 0, len(pending)
    for key, raw in stored:
        while i < n and pending[i][0] < key:
            yield from _live(pending[i])
            i += 1
        if i < n and pending[i][0] == key:
            yield from _live(pending[i])
            i += 1
        else:
            yield key, raw
    for entry in pending[i:]:
        yield from _live(entry)


def _live(entry: tuple[bytes, bytes | None]) -> Iterator[tuple[bytes, bytes]]:
    key, raw = entry
    if raw is not None:
        yield key, raw
