"""The transaction overlay's entries: what a write (or a read) leaves in the overlay dict.

An entry is one of:

* a scalar (int, bool, None or str, exact types): the value itself. It is
  immutable, so sharing it with the caller is safe, and it is encoded only at commit,
  where the encoded bytes are freed right after the batch copies them;
* a live value (a list or dict, exact types): the object the job assigned, or the one a
  read decoded and handed out. Every later read returns this same object, so a change
  made to it in place is a change to the state, as with a dict: `settle` encodes it
  when the transaction commits (and drops it if it still holds what RocksDB holds, so
  a value only read costs no write and no changelog record);
* bytes: anything else JSON-able (a float, since NaN must read back as the null it is
  stored as; a tuple, which JSON holds as an array), encoded at write time, so what
  reads back is what a read after the commit would return. (User values are never
  bytes: JSON has no bytes type.);
* DELETED: a delete.

Encoded values are copied into exact-size objects: orjson returns a bytes that it
over-allocated and shrank, and keeping thousands of those alive until commit
fragments the heap, which every write then pays for (docs/performance.md,
"Measurements behind the code").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import orjson
import rocksdict

from store.base import Changes
from store.codec import BYTES_TAG, STR_TAG, Key, encode_key, encode_value
from store.errors import StoreError

__all__ = ["ABSENT", "DELETED", "LIVE", "ClosedLog", "Overlay", "add_to_batch", "freeze",
           "merge", "overlay_changes", "prefix_changes"]


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


ABSENT: Any = _Sentinel("ABSENT")  # "not in the overlay" (the undo log uses it too)
DELETED: Any = _Sentinel("DELETED")  # a delete in the overlay

_dumps = orjson.dumps
LIVE = frozenset({list, dict})  # the classes of live entries (mutable JSON containers)


class Overlay:
    """One task store's open transaction: its entries by key, the committed encodings
    of the live values it read (so an unchanged one costs no write), and the undo log of
    the record being processed.

    `entries` and `bases` are the same dicts for the store's whole life (emptied, never
    replaced), so the state mapping keeps them as attributes of its own: its reads and
    writes, the per-record hot path, reach them in one step.
    """

    __slots__ = ("entries", "bases", "undo", "_path")

    def __init__(self, path: Path) -> None:
        self.entries: dict[Key, Any] = {}
        self.bases: dict[Key, bytes] = {}
        # None: no undo log kept (the default on_error policy, "fail", aborts the whole
        # transaction instead, and so pays nothing per write for one)
        self.undo: list[tuple[Key, Any]] | None = None
        self._path = path

    def begin_record(self) -> None:
        """Start the undo log of one record (the previous record's writes stay).

        From the first call on, every write also appends to the undo log.
        """
        if self.undo is None:
            self.undo = []
        else:
            self.undo.clear()

    def rollback_record(self) -> None:
        """Undo the writes made since `begin_record` (and not yet committed).

        Raises:
            StoreError: `begin_record` was never called, so there is no undo log.
        """
        if self.undo is None:
            raise StoreError(self._path, (
                f"rollback_record() on task store {self._path} without begin_record(): "
                "call begin_record() before each record that may be rolled back"))
        entries = self.entries
        for key, previous in reversed(self.undo):
            if previous is ABSENT:
                entries.pop(key, None)
            else:
                entries[key] = previous
        self.undo.clear()

    def settle(self) -> None:
        """Encode the live values; drop those that hold what RocksDB holds already.

        Raises:
            StoreError: a live value no longer JSON-able (the caller aborts or retries).
        """
        try:
            _settle(self.entries, self.bases)
        except TypeError as exc:
            raise StoreError(self._path, (
                f"task store {self._path}: {exc}; a list or dict read from the state was "
                "changed in place to hold something JSON cannot (a set, a tuple key, an "
                "object): store only JSON values")) from exc

    def drop(self) -> None:
        """Empty the transaction: it was committed, or is aborted."""
        self.entries.clear()
        self.bases.clear()
        if self.undo is not None:
            self.undo.clear()

    def close(self) -> None:
        """Drop the transaction; from now on any write fails (`ClosedLog`)."""
        self.entries.clear()
        self.bases.clear()
        self.undo = ClosedLog(self._path)


class ClosedLog(list[tuple[Key, Any]]):
    """The undo log of a closed store: any write fails at no cost to the open path
    (writes check the undo log anyway; reads fail in RocksDB)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._path = path

    def append(self, item: tuple[Key, Any]) -> None:
        raise StoreError(self._path, f"task store {self._path} is closed")


def freeze(value: Any) -> bytes:
    """The entry of a non-scalar value: its encoding, in an exact-size bytes.

    Raises:
        TypeError: the value is not JSON-able.
    """
    return bytes(memoryview(encode_value(value)))


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


def overlay_changes(overlay: dict[Key, Any]) -> Changes:
    """Every overlay entry as an encoded key and value (None for a delete), in key
    order: a changelog's records, encoded once at commit as `add_to_batch` does.

    An active task with a changelog pays this per changed key, so the common shapes
    take no Python step per entry: keys all str or all bytes sort as they are (UTF-8
    keeps code point order, and the tag is the same for all), and values all bytes
    (containers) or all 64-bit ints encode through `map`. An int goes through
    `b"%d"`, the bytes orjson writes for it, because orjson's own result is an
    over-allocated buffer shrunk in place, and thousands of them kept alive until the
    commit cost far more each (`freeze` copies containers for the same reason).
    Anything else takes the per-entry loop.

    Kept apart from `add_to_batch` on purpose: a commit without a changelog has no use
    for these lists, and building them before putting them made it slower
    (`bench/store_write.py`; docs/performance.md, "Measurements behind the code").
    """
    key_types = set(map(type, overlay))
    if len(key_types) != 1:
        return _sorted_changes(overlay)
    keys: list[Any] = sorted(overlay)
    if str in key_types:
        raw_keys = list(map(STR_TAG.__add__, map(str.encode, keys)))
    else:
        raw_keys = list(map(BYTES_TAG.__add__, keys))
    entries = list(map(overlay.__getitem__, keys))
    value_types = set(map(type, entries))
    if value_types == {bytes}:
        return Changes(raw_keys, entries)
    if value_types == {int} and _INT_MIN <= min(entries) and max(entries) <= _INT_MAX:
        return Changes(raw_keys, list(map(_INT_FORMAT, entries)))
    return Changes(raw_keys, list(map(_change_value, entries)))


_INT_FORMAT = b"%d".__mod__
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1        # what orjson writes as a plain number


def _change_value(entry: Any) -> bytes | None:
    """An overlay entry's encoded value, in an exact-size bytes (see overlay_changes)."""
    cls = entry.__class__
    if cls is bytes:
        return entry  # type: ignore[no-any-return]
    if entry is DELETED:
        return None
    if cls is int and _INT_MIN <= entry <= _INT_MAX:
        return _INT_FORMAT(entry)
    return freeze(entry)


def prefix_changes(overlay: dict[Key, Any], prefix: Key) -> Changes:
    """The overlay entries of the keys `prefix` selects (keys of its type that start
    with it), as `overlay_changes` gives them: a scan's share of the open transaction,
    found in one pass without sorting the rest."""
    cls = str if isinstance(prefix, str) else bytes
    held: Iterable[Any] = overlay
    wanted: Any = prefix        # of `cls`: the keys kept are of its type
    keys: list[Any] = sorted(k for k in held if k.__class__ is cls and k.startswith(wanted))
    if cls is str:
        raw_keys = list(map(STR_TAG.__add__, map(str.encode, keys)))
    else:
        raw_keys = list(map(BYTES_TAG.__add__, keys))
    return Changes(raw_keys, [_change_value(overlay[k]) for k in keys])


def _sorted_changes(overlay: dict[Key, Any]) -> Changes:
    """overlay_changes for an overlay holding both str and bytes keys."""
    pairs = sorted((encode_key(k), _change_value(e)) for k, e in overlay.items())
    return Changes([k for k, _ in pairs], [v for _, v in pairs])


def _settle(overlay: dict[Key, Any], bases: dict[Key, bytes]) -> None:
    """Replace each live entry by its encoding, or drop it when that is `bases[key]`
    (the committed encoding it was read from: the commit would rewrite the same value).

    A pass over the overlay in C finds whether there is any live entry; an overlay of
    scalars (a counting job's) pays nothing more.

    Raises:
        TypeError: a live value no longer JSON-able, naming its key (entries before
            it in the overlay may be settled; the caller aborts or retries).
    """
    if LIVE.isdisjoint(set(map(type, overlay.values()))):
        bases.clear()
        return
    for key, entry in list(overlay.items()):
        if entry.__class__ in LIVE:
            try:
                raw = freeze(entry)
            except TypeError as exc:
                raise TypeError(f"the value of state key {key!r} is not JSON-able: {exc}"
                                ) from None
            if bases.get(key) == raw:
                del overlay[key]
            else:
                overlay[key] = raw
    bases.clear()


def merge(pending: Changes, stored: Iterator[tuple[bytes, bytes]]
          ) -> Iterator[tuple[bytes, bytes]]:
    """Merge the overlay's sorted changes over sorted stored entries; None values hide
    keys. The changes past the last stored key (all of them, on an empty store: a first
    snapshot) are passed on without a Python step each when none is a delete."""
    keys, values = pending.raw_keys, pending.raw_values
    i, n = 0, len(keys)
    for key, raw in stored:
        while i < n and keys[i] < key:
            value = values[i]
            if value is not None:
                yield keys[i], value
            i += 1
        if i < n and keys[i] == key:
            value = values[i]
            if value is not None:
                yield key, value
            i += 1
        else:
            yield key, raw
    rest = values[i:]
    if None in rest:
        yield from ((k, v) for k, v in zip(keys[i:], rest, strict=True) if v is not None)
    else:
        yield from cast("Iterator[tuple[bytes, bytes]]", zip(keys[i:], rest, strict=True))
