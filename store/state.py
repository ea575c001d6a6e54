"""The state a job's `process()` sees: a `MutableMapping`, plus entries that expire in
stream time (store/expiry.py) and scans of the keys under a prefix, in key order.

Two implementations hold it: the task store (store/rocksdb.py: RocksDB and the open
transaction's overlay) and the Spark fold's single-range state
(processor/spark/fold.py). Both keep the same rules, so a job reads the same state on
every path:

* **The clock.** `now` is the timestamp of the record being processed. Whoever calls
  `process()` sets it first; `Job.process_batch` does so per record through `clocked`
  (a chain of C calls: the batched path runs without a Python step per record).
* **Prefixes.** Keys are bytes or str, and the two never meet: a str prefix selects
  the str keys that start with it (as `str.startswith` says, which is the order and
  prefix of their UTF-8 bytes), a bytes prefix the bytes keys. `""` selects every str
  key, `b""` every bytes key. A scan yields `(key, value)` in key order (str keys by
  code point, bytes keys bytewise) and skips expired entries, deleting them as a read
  does.
* **What a scan sees of writes made while it runs**: the keys are those live when it
  began; each value is the one its key holds when the scan reaches it. A key deleted
  meanwhile is skipped, a key added meanwhile is not seen (the write is kept). Both
  implementations do exactly this, so a job that writes as it scans rebuilds the same
  state on every path.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Iterator, MutableMapping
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Any, Protocol

from store.codec import BYTES_TAG, STR_TAG, Key

__all__ = ["State", "Timed", "clocked", "prefix_bounds"]

_TIMESTAMP = attrgetter("timestamp")
_SECOND = itemgetter(1)


class Timed(Protocol):
    """What `clocked` needs of a record: its timestamp (processor.job.Record)."""

    @property
    def timestamp(self) -> int: ...


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
        """Set the clock (done before each record; a `process_batch` that does a
        batch's work at once sets it per record itself)."""

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
    def clocked(self, records: Iterable[Timed]) -> Iterator[State]:
        """This state once per record, its clock set to that record's timestamp as the
        record is reached: `map(job.process, records, state.clocked(records))`."""


def clocked(state: State, set_now: Any, records: Iterable[Timed]) -> Iterator[State]:
    """`state.clocked(records)` for a state whose clock is the slot `set_now` (a member
    descriptor's `__set__`): each step sets it, then yields the state, all in C.

    `zip` takes the setter's result (None) before the state, so the clock is set when
    `map(process, records, ...)` asks for the state of that record, just before it calls
    process() on it; a record's outputs are drained before the next one is reached."""
    stamps = map(set_now, repeat(state), map(_TIMESTAMP, records))
    return map(_SECOND, zip(stamps, repeat(state)))


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
