"""Folding one key's records in offset order through the job's `process()` on a
single-key state (input source), with the store's value codec inlined."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any

import orjson

from processor.job import Job, Record
from store import decode_key, decode_value, encode_key, encode_value

__all__ = ["FoldState", "Timings", "replay"]


_dumps = orjson.dumps


_loads = orjson.loads


_JSONDecodeError = orjson.JSONDecodeError


def _decode(raw: bytes) -> Any:
    """The store's value decoding, with orjson's fast path inlined."""
    try:
        return _loads(raw)
    except _JSONDecodeError:
        return decode_value(raw)


class FoldState(MutableMapping[Any, Any]):
    """A job's state during a fold, with the task store's semantics.

    Values are JSON-encoded on write and decoded on read, as TaskStore does, so a job
    sees exactly what it would see on the consumer path (tuples come back as lists,
    in-place mutation of a read value changes nothing); keys are normalised the same
    way. `begin`/`rollback` undo one record's writes, as the consumer path does when
    process() raises (see `replay`).
    """

    __slots__ = ("raw", "carried", "_undo")

    def __init__(self) -> None:
        self.raw: dict[Any, bytes] = {}
        # changelog folds only: input partition -> the offset its records carried
        self.carried: dict[str, int] = {}
        self._undo: list[tuple[Any, bytes | None]] = []

    def __getitem__(self, key: Any) -> Any:
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise(key)
        return _decode(self.raw[key])

    def get(self, key: Any, default: Any = None) -> Any:  # the hot path: kept flat
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise(key)
        raw = self.raw.get(key)
        if raw is None:
            return default
        try:
            return _loads(raw)
        except _JSONDecodeError:
            return decode_value(raw)

    def __setitem__(self, key: Any, value: Any) -> None:
        if key.__class__ is not bytes and key.__class__ is not str:
            key = _normalise(key)
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
        self._undo.append((key, self.raw.pop(key)))

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes | str) and key in self.raw

    def __iter__(self) -> Iterator[Any]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    def begin(self) -> None:
        """Start one record's undo log."""
        self._undo.clear()

    def rollback(self) -> None:
        """Undo the writes since `begin`."""
        raw = self.raw
        for key, previous in reversed(self._undo):
            if previous is None:
                raw.pop(key, None)
            else:
                raw[key] = previous
        self._undo.clear()


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
