"""Folding one key's records in offset order through the job's `process()` on a
single-key state (input source), with the store's value codec inlined, and the
store's rules for entries that expire and for scans (store/state.py)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from processor.job import Job, Record
from store import State, decode_key, decode_value, encode_key, encode_value
from store.expiry import EXPIRING_TAG, decode_expiring, encode_expiring, expires_at, is_expired
from store.state import R, StreamClock, prefix_bounds

__all__ = ["FoldState", "Timings", "replay"]


_dumps = orjson.dumps
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError


class FoldState(State):
    """A job's state during a fold, with the task store's semantics.

    Values are JSON-encoded on write and decoded on read, as TaskStore does, so a job
    sees exactly what it would see on the consumer path: tuples come back as lists, and
    a list or dict read from the state (or assigned to it) is the state's own value,
    changed in place by whatever the job does to it (store/_overlay.py, live entries),
    encoded by `settle` before the fold's result is written. Keys are normalised the
    same way. `begin`/`rollback` undo one record's writes and in-place changes, as the
    consumer path does when process() raises (see `replay`). Entries with a TTL and
    scans follow store/state.py: an expired entry a read meets is deleted (undone with
    its record's writes), a scan sorts the keys under its prefix.
    """

    __slots__ = ("raw", "carried", "_undo", "_clock")

    def __init__(self) -> None:
        # key -> encoded value, or the live list or dict it was decoded into
        self.raw: dict[Any, Any] = {}
        # changelog folds only: input partition -> the offset its records carried
        self.carried: dict[str, int] = {}
        self._undo: list[tuple[Any, Any]] = []
        self._clock = StreamClock()

    @property
    def now(self) -> int | None:
        """The stream time entries expire by: the record being folded."""
        return self._clock.now

    @now.setter
    def now(self, timestamp: int | None) -> None:
        self._clock.set(timestamp)

    def following(self, records: Iterable[R]) -> Iterator[R]:
        """`records`, the clock following them (store/state.py)."""
        return self._clock.following(records)

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def get(self, key: Any, default: Any = None) -> Any:  # the hot path: kept flat
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise(key)
        raw = self.raw.get(key)
        if raw is None:
            return default
        if raw.__class__ is not bytes:          # a live list or dict
            self._undo.append((key, encode_value(raw)))
            return raw
        try:
            value = _loads(raw)
        except _JSONDecodeError:
            if raw[:1] == EXPIRING_TAG:
                return self._expiring(key, raw, default)
            value = decode_value(raw)
        if value.__class__ is list or value.__class__ is dict:
            self._undo.append((key, raw))
            self.raw[key] = value
        return value

    def _expiring(self, key: Any, raw: bytes, default: Any) -> Any:
        """The value of an entry with a TTL, or once expired its delete and `default`."""
        if not is_expired(raw, self._clock.now):
            return decode_expiring(raw)
        self._undo.append((key, self.raw.pop(key)))
        return default

    def setdefault(self, key: Any, default: Any = None) -> Any:
        """`dict.setdefault`, returning the stored value itself (see TaskState's)."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            self[key] = default
            value = self.get(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise(key)
        encoded: Any = value
        if value.__class__ is list or value.__class__ is dict:
            encode_value(value)                 # refuses what JSON cannot hold, here
        else:
            try:
                encoded = _dumps(value)
            except TypeError:
                encoded = encode_value(value)
        raw = self.raw
        self._undo.append((key, raw.get(key)))
        raw[key] = encoded

    def __delitem__(self, key: Any) -> None:
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise(key)
        if key not in self:         # an expired entry is deleted there, and absent
            raise KeyError(key)
        self._undo.append((key, self.raw.pop(key)))

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, bytes | str):
            return False
        raw = self.raw.get(key)
        if raw is None:
            return False
        if raw.__class__ is bytes and raw[:1] == EXPIRING_TAG and is_expired(raw, self._clock.now):
            self._undo.append((key, self.raw.pop(key)))
            return False
        return True

    def __iter__(self) -> Iterator[Any]:
        now = self._clock.now
        return (key for key, raw in list(self.raw.items()) if raw.__class__ is not bytes
                or raw[:1] != EXPIRING_TAG or not is_expired(raw, now))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def put(self, key: Any, value: Any, *, ttl_ms: int | None = None) -> None:
        """`state[key] = value`; with `ttl_ms`, expiring `ttl_ms` after `now`."""
        if ttl_ms is None:
            self[key] = value
            return
        raw = encode_expiring(value, expires_at(self._clock.now, ttl_ms))
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise(key)
        self._undo.append((key, self.raw.get(key)))
        self.raw[key] = raw

    def scan(self, prefix: Any) -> Iterator[tuple[Any, Any]]:
        """The live (key, value) pairs under `prefix` in key order: the keys taken now,
        each value read as the scan reaches it (store/state.py)."""
        start, _ = prefix_bounds(prefix)
        chosen: Any = decode_key(start)
        cls = chosen.__class__
        held: Iterable[Any] = self.raw
        keys = sorted(k for k in held if k.__class__ is cls and k.startswith(chosen))
        return self._read_each(keys)

    def _read_each(self, keys: list[Any]) -> Iterator[tuple[Any, Any]]:
        for key in keys:
            value = self.get(key, _MISSING)
            if value is not _MISSING:
                yield key, value

    def begin(self) -> None:
        """Start one record's undo log."""
        self._undo.clear()

    def rollback(self) -> None:
        """Undo the writes and in-place changes since `begin`."""
        raw = self.raw
        for key, previous in reversed(self._undo):
            if previous is None:
                raw.pop(key, None)
            else:
                raw[key] = previous
        self._undo.clear()

    def settle(self) -> dict[Any, bytes]:
        """Encode the live values: `raw` then maps every key to its encoded value.

        Raises:
            TypeError: a value changed in place no longer JSON-able, naming its key.
        """
        raw = self.raw
        for key, value in raw.items():
            if value.__class__ is not bytes:
                try:
                    raw[key] = encode_value(value)
                except TypeError as exc:
                    raise TypeError(f"the value of state key {key!r} is not JSON-able: "
                                    f"{exc}") from None
        return raw


_MISSING: Any = object()


def _normalise(key: Any) -> Any:
    """The store's key normalisation: exact bytes or str, or TypeError."""
    return decode_key(encode_key(key))


# runs a generator to its end, discarding what it yields, without a Python-level loop
_drain: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


def replay(job: Job, state: FoldState, record: Record) -> bool:
    """process() one record, output discarded; False if it raised (its writes undone).

    A failing record is skipped as the consumer path's replica skips it: its owner
    either skipped it too (on_error skip/dlq) or never committed past it (fail).
    """
    state.begin()
    state.now = record.timestamp
    try:
        _drain(job.process(record, state) or ())
    except Exception:  # noqa: BLE001 - user code, see the docstring
        state.rollback()
        return False
    return True


class Timings:
    """Accumulator parameter summing {"name": number} dicts across executor tasks."""

    def zero(self, value: dict[str, float]) -> dict[str, float]:
        return {}

    def addInPlace(self, a: dict[str, float], b: dict[str, float]) -> dict[str, float]:  # noqa: N802
        for name, amount in b.items():
            a[name] = a.get(name, 0.0) + amount
        return a
