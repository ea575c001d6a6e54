"""One task's state as a job sees it: a `State` mapping over the committed data of its
RocksDB database (store/db.py) with the open transaction's entries on top
(store/_overlay.py).

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
* What a job sees beyond a mapping (store/state.py): entries that expire in stream time
  (store/expiry.py: stored behind a tag byte that is not JSON, so they take the reads'
  rare path, and a read that finds one expired deletes it like `del`), and scans of a
  prefix, the overlay's entries of the prefix merged over a RocksDB range.

The mapping methods are the per-record hot path: they are kept flat (no helper layers,
the overlay's dicts and the rocksdict handle held as attributes of their own,
module-level aliases for the C functions they call).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, ValuesView
from typing import Any, cast

import orjson
import rocksdict

from store._overlay import (
    ABSENT,
    DELETED,
    LIVE,
    Overlay,
    freeze,
    merge,
    overlay_changes,
    prefix_changes,
)
from store.codec import (
    BYTES_TAG,
    DATA_END,
    STR_TAG,
    Key,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from store.db import StoreDb
from store.expiry import EXPIRING_TAG, decode_expiring, encode_expiring, expires_at, is_expired
from store.state import R, State, StreamClock, prefix_bounds

__all__ = ["TaskState", "merged"]

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_DbClosedError = rocksdict.DbClosedError
_NoneType = type(None)
_LIVE = LIVE
_RAISE: Any = object()      # `_expiring`: no default, a KeyError


class TaskState(State):
    """One task's state: a MutableMapping over its database and open transaction.

    Args:
        db: the task store's database (its committed data).
        overlay: the task store's open transaction.
    """

    __slots__ = ("_db", "_raw", "_ov", "_overlay", "_bases", "_clock")

    def __init__(self, db: StoreDb, overlay: Overlay) -> None:
        self._db = db
        self._raw = db.raw
        self._ov = overlay
        self._overlay = overlay.entries
        self._bases = overlay.bases
        self._clock = StreamClock()

    @property
    def now(self) -> int | None:
        """The stream time entries expire by (store/state.py)."""
        return self._clock.now

    @now.setter
    def now(self, timestamp: int | None) -> None:
        self._clock.set(timestamp)

    def following(self, records: Iterable[R]) -> Iterator[R]:
        """`records`, the clock following them (store/state.py)."""
        return self._clock.following(records)

    def __getitem__(self, key: Key) -> Any:
        entry = self._overlay.get(key, ABSENT)
        if entry is ABSENT:
            raw = self._stored(key)
            if raw is None:
                raise KeyError(key)
        elif entry.__class__ is not bytes:
            if entry is DELETED:
                raise KeyError(key)
            if entry.__class__ in _LIVE and (undo := self._ov.undo) is not None:
                undo.append((key, freeze(entry)))
            return entry
        else:
            raw = entry
        try:
            value = _loads(raw)
        except _JSONDecodeError:
            if raw[:1] == EXPIRING_TAG:
                return self._expiring(key, raw, _RAISE)
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
                raw = self._raw.get(raw_key)
            except _DbClosedError:
                self._db.raise_closed()
            if raw is None:
                return default
        elif entry.__class__ is not bytes:
            if entry is DELETED:
                return default
            if entry.__class__ in _LIVE and (undo := self._ov.undo) is not None:
                undo.append((key, freeze(entry)))
            return entry
        else:
            raw = entry
        try:
            value = _loads(raw)
        except _JSONDecodeError:
            if raw[:1] == EXPIRING_TAG:
                return self._expiring(key, raw, default)
            value = decode_value(raw)
        if value.__class__ in _LIVE:      # `_adopt`, inlined: a dict job's every read
            if key.__class__ is not bytes and key.__class__ is not str:
                key = _normalise_key(key)
            if (undo := self._ov.undo) is not None:
                undo.append((key, entry))
            if entry is ABSENT:
                self._bases[key] = raw
            self._overlay[key] = value
        return value

    def _expiring(self, key: Key, raw: bytes, default: Any) -> Any:
        """The value of an entry with a TTL (a copy), or, once expired at `now`, its
        delete (the transaction's, like `del`) and `default` (`_RAISE`: KeyError)."""
        if not is_expired(raw, self._clock.now):
            return decode_expiring(raw)
        self.delete(key)
        if default is _RAISE:
            raise KeyError(key)
        return default

    def _adopt(self, key: Key, value: Any, raw: bytes, entry: Any) -> None:
        """Make `value`, a list or dict just decoded from `raw`, the key's live value:
        later reads return this same object and the commit writes what it then holds
        (not at all if that is what RocksDB holds already, `raw` when `entry` is ABSENT).
        The undo log gets the entry it replaces, so a rolled-back record's in-place
        changes are undone with its writes."""
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise_key(key)
        if (undo := self._ov.undo) is not None:
            undo.append((key, entry))
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
        if (undo := self._ov.undo) is not None:
            undo.append((key, self._overlay.get(key, ABSENT)))
        self._overlay[key] = value

    def __delitem__(self, key: Key) -> None:
        if not self.contains(key):
            raise KeyError(key)
        self.delete(key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes | str) and self.contains(key)

    def __iter__(self) -> Iterator[Key]:
        """Keys in encoded-key order; expired entries are skipped (not deleted: a read
        of the store outside `process()`, such as a split's pruning, iterates too)."""
        now = self._clock.now
        for raw_key, raw in merged(self._db, self._overlay):
            if raw[:1] != EXPIRING_TAG or not is_expired(raw, now):
                yield decode_key(raw_key)

    def __len__(self) -> int:
        now = self._clock.now
        return sum(1 for _, raw in merged(self._db, self._overlay)
                   if raw[:1] != EXPIRING_TAG or not is_expired(raw, now))

    def items(self) -> ItemsView[Key, Any]:
        """Ordered (key, value) pairs in one pass (no lookup per key)."""
        return _ItemsView(self)

    def values(self) -> ValuesView[Any]:
        """Values in key order, in one pass."""
        return _ValuesView(self)

    def put(self, key: Key, value: Any, *, ttl_ms: int | None = None) -> None:
        """`store[key] = value`; with `ttl_ms`, expiring `ttl_ms` after `now`
        (store/expiry.py).

        Raises:
            TypeError: a key or value the state cannot hold.
            ValueError: a `ttl_ms` that is not a positive int, or no record time.
        """
        if ttl_ms is None:
            self[key] = value
            return
        raw = encode_expiring(value, expires_at(self._clock.now, ttl_ms))
        key = _normalise_key(key)
        if (undo := self._ov.undo) is not None:
            undo.append((key, self._overlay.get(key, ABSENT)))
        self._overlay[key] = raw

    def scan(self, prefix: Key) -> Iterator[tuple[Key, Any]]:
        """The live (key, value) pairs under `prefix`, in key order (store/state.py):
        the open transaction's entries merged over the committed range; an expired
        entry met is deleted, as a read deletes it.

        Raises:
            TypeError: `prefix` is neither bytes nor str.
            StoreError: the store is closed, or a damaged block was read.
        """
        start, end = prefix_bounds(prefix)
        self._db.check_open()
        pending = prefix_changes(self._overlay, decode_key(start))
        return self._decoded(merge(pending, self._db.scan(start, end)), remove=True)

    def delete(self, key: Key) -> None:
        """Delete `key` in the overlay; no error if it does not exist."""
        key = _normalise_key(key)
        if (undo := self._ov.undo) is not None:
            undo.append((key, self._overlay.get(key, ABSENT)))
        self._overlay[key] = DELETED

    def contains(self, key: Key) -> bool:
        """Whether `key` has a value, counting uncommitted writes and deletes (and an
        expired entry, deleted as a read finds it)."""
        entry = self._overlay.get(key, ABSENT)
        if entry is ABSENT:
            raw = self._stored(key)
            if raw is None:
                return False
        elif entry.__class__ is bytes:
            raw = entry
        else:
            return entry is not DELETED
        if raw[:1] == EXPIRING_TAG and is_expired(raw, self._clock.now):
            self.delete(key)
            return False
        return True

    def _stored(self, key: Key) -> bytes | None:
        """The committed encoded value of `key`, or None."""
        if key.__class__ is bytes:
            raw_key = BYTES_TAG + key
        elif key.__class__ is str:
            raw_key = STR_TAG + key.encode()
        else:
            raw_key = encode_key(key)
        try:
            return cast("bytes | None", self._raw.get(raw_key))
        except _DbClosedError:
            self._db.raise_closed()

    def iter_items(self, remove: bool = True) -> Iterator[tuple[Key, Any]]:
        """(key, value) in encoded-key order: all bytes keys, then all str keys.

        Args:
            remove: delete the expired entries met, as a read does (False: a look at
                the state from outside `process()`, which changes nothing).
        """
        return self._decoded(merged(self._db, self._overlay), remove)

    def _decoded(self, pairs: Iterator[tuple[bytes, bytes]], remove: bool
                 ) -> Iterator[tuple[Key, Any]]:
        """The live (key, value) pairs of the keys in `pairs` (merged encoded pairs,
        taken when the iteration began), each value as it is when the iteration reaches
        its key: lists and dicts become the state's own (as a read makes them), keys
        deleted meanwhile or expired are skipped (store/state.py)."""
        overlay, now = self._overlay, self._clock.now
        for raw_key, raw in pairs:
            key = decode_key(raw_key)
            entry = overlay.get(key, ABSENT)
            if entry is not ABSENT:         # its value now, not when the pairs were taken
                cls = entry.__class__
                if cls in _LIVE:
                    if (undo := self._ov.undo) is not None:
                        undo.append((key, freeze(entry)))
                    yield key, entry
                    continue
                if entry is DELETED:
                    continue
                if cls is not bytes:
                    yield key, entry
                    continue
                raw = entry
            if raw[:1] == EXPIRING_TAG:
                if not is_expired(raw, now):
                    yield key, decode_expiring(raw)
                elif remove:
                    self.delete(key)
                continue
            value = decode_value(raw)
            if value.__class__ in _LIVE:
                self._adopt(key, value, raw, entry)
            yield key, value


class _ItemsView(ItemsView[Key, Any]):
    _mapping: TaskState

    def __iter__(self) -> Iterator[tuple[Key, Any]]:
        return self._mapping.iter_items()


class _ValuesView(ValuesView[Any]):
    _mapping: TaskState

    def __iter__(self) -> Iterator[Any]:
        return (value for _, value in self._mapping.iter_items())


def _normalise_key(key: Any) -> Key:
    """`key` as exactly bytes or str (subclasses, bytearray, memoryview converted)."""
    if isinstance(key, str):
        return str.__str__(key)
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    raise TypeError(f"state keys must be bytes or str, got {type(key).__name__}: {key!r}")


def merged(db: StoreDb, overlay: dict[Key, Any]) -> Iterator[tuple[bytes, bytes]]:
    """Committed data merged with a snapshot of the overlay, in encoded-key order."""
    db.check_open()
    return merge(overlay_changes(overlay), db.scan(BYTES_TAG, DATA_END))
