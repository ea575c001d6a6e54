"""The state a job's `process()` sees: a `MutableMapping`, plus entries that expire in
stream time (store/expiry.py) and scans of the keys under a prefix, in key order.

Two implementations hold it: the task store's mapping (store/task_state.py: RocksDB
and the open transaction's overlay) and the Spark fold's single-range state
(processor/spark/fold.py). Both keep the same rules, so a job reads the same state on
every path:

* **The clock.** `now` is the timestamp of the record being processed (`StreamClock`).
  Whoever calls `process()` on one record sets it first; `Job.process_batch` hands its
  records to `process()` through `state.following(records)`, an iterator whose
  position tells the clock which record is being processed: the batched path pays
  nothing per record, and only a read of `now` (a TTL's) looks the record up.
* **Prefixes.** Keys are bytes or str, and the two never meet: a str prefix selects
  the str keys that start with it (as `str.startswith` says, which is the order and
  prefix of their UTF-8 bytes), a bytes prefix the bytes keys. `""` selects every str
  key, `b""` every bytes key. A scan yields `(key, value)` in key order (str keys by
  code point, bytes keys bytewise) and skips expired entries, deleting them as a read
  does.
* **What a scan sees of writes made while it runs**: the keys are those held when it
  began; each value is the one its key holds when the scan reaches it. A key deleted
  meanwhile is skipped, a key added meanwhile is not seen (the write is kept). Both
  implementations do exactly this, so a job that writes as it scans rebuilds the same
  state on every path.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Iterator, MutableMapping, Sequence
from operator import length_hint
from typing import Any, Protocol, TypeVar

from store.codec import BYTES_TAG, STR_TAG, Key

__all__ = ["R", "State", "StreamClock", "Timed", "prefix_bounds"]


class Timed(Protocol):
    """What the clock needs of a record: its timestamp (processor.job.Record)."""

    @property
    def timestamp(self) -> int: ...


R = TypeVar("R", bound=Timed)


class State(MutableMapping[Key, Any]):
    """The task's state as a job's `process()` reads and writes it."""

    __slots__ = ()

    @property
    @abstractmethod
    def now(self) -> int | None:
        """The stream time entries expire by: the timestamp (ms) of the record being
        processed; None before the first one."""

    @now.setter
    @abstractmethod
    def now(self, timestamp: int | None) -> None:
        """Set the clock (before a record that is processed alone)."""

    @abstractmethod
    def put(self, key: Key, value: Any, *, ttl_ms: int | None = None) -> None:
        """`state[key] = value`; with `ttl_ms`, the entry reads as absent to records
        `ttl_ms` or more after this one (stream time: their timestamps).

        Raises:
            TypeError: a key that is not bytes or str, or a value JSON cannot hold.
            ValueError: `ttl_ms` is not a positive int, or there is no record time.
        """

    @abstractmethod
    def scan(self, prefix: Key) -> Iterator[tuple[Key, Any]]:
        """The live `(key, value)` pairs whose key starts with `prefix`, in key order
        (module docstring: what a prefix selects).

        Raises:
            TypeError: `prefix` is neither bytes nor str.
        """

    @abstractmethod
    def following(self, records: Iterable[R]) -> Iterator[R]:
        """`records`, one at a time, the clock at the timestamp of the one last taken
        until the next is: `for record in state.following(records): ...` (or
        `map(job.process, state.following(records), repeat(state))`)."""


class StreamClock:
    """A state's clock: the timestamp of the record being processed.

    Set for one record (`set`), or following a batch (`following`): then the record
    being processed is the one the batch's iterator gave last, which its position
    tells (`length_hint` of a list iterator: what is left), so following costs nothing
    per record; `now` looks the record up when asked. A record's outputs are drained
    before the next record is taken (the runtime's `map` and `chain` do), so the
    position is that record's while its `process()` runs.
    """

    __slots__ = ("_now", "_records", "_position")

    def __init__(self) -> None:
        self._now: int | None = None
        self._records: Sequence[Timed] = ()
        self._position: Iterator[Timed] | None = None

    @property
    def now(self) -> int | None:
        """The timestamp of the record being processed (None before any)."""
        position = self._position
        if position is None:
            return self._now
        index = len(self._records) - length_hint(position) - 1
        return self._records[index].timestamp if index >= 0 else self._now

    def set(self, timestamp: int | None) -> None:
        """The record being processed is at `timestamp`."""
        self._now, self._position = timestamp, None

    def following(self, records: Iterable[R]) -> Iterator[R]:
        """`records` as an iterator the clock follows (see the class)."""
        listed = records if isinstance(records, list | tuple) else list(records)
        self._now = self.now                # before the first: the last record's time
        self._records = listed
        position = iter(listed)
        self._position = position
        return position


def prefix_bounds(prefix: Key) -> tuple[bytes, bytes]:
    """The encoded keys `[start, end)` of the keys `prefix` selects.

    Raises:
        TypeError: `prefix` is neither bytes nor str.
    """
    if isinstance(prefix, str):
        start = STR_TAG + prefix.encode()
    elif isinstance(prefix, bytes | bytearray | memoryview):
        start = BYTES_TAG + bytes(prefix)
    else:
        raise TypeError(f"a scan's prefix is bytes or str, as state keys are, got "
                        f"{type(prefix).__name__}: {prefix!r}")
    end = start.rstrip(b"\xff")     # never empty: the tag byte is not 0xff
    return start, end[:-1] + bytes([end[-1] + 1])
