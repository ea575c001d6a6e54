"""The task store interface, apart from its RocksDB implementation.

A store is the `state` mapping a job's `process()` sees, plus the transaction around
it: writes go to an overlay that reads see; `commit(offsets)` makes the overlay and the
applied offsets durable in one atomic write; `abort()` drops the overlay. Per-record
undo (`begin_record` / `rollback_record`) serves the processor's on_error policies.
Applied offsets are Kafka-style: per "topic:N", the NEXT offset to apply.
`changes()` is the open transaction's writes as changelog records (last value per key);
`apply_changes(records, offsets)` writes such records, read back from the changelog,
together with offsets in one WriteBatch (a replica's changelog position).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from store.codec import Key
from store.state import State

__all__ = ["Change", "Changes", "Key", "Offsets", "Store"]

Offsets = Mapping[str, int]
# one changelog record: (encoded key, encoded value or None for a delete)
Change = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class Changes:
    """One transaction's state changes, in key order: encoded keys and values (None:
    a delete) as two parallel lists, which the producer and the WriteBatch take through
    `map`, without a Python step per change."""

    raw_keys: list[bytes]
    raw_values: list[bytes | None]

    def __len__(self) -> int:
        return len(self.raw_keys)

    def __iter__(self) -> Iterator[Change]:
        return zip(self.raw_keys, self.raw_values, strict=True)


class Store(Protocol):
    """What the processor needs from a task store."""

    @property
    def path(self) -> Path:
        """The store's directory."""
        ...

    def expect_reads(self) -> None:
        """A store opened for writes only is about to be read (see TaskStore)."""
        ...

    @property
    def state(self) -> State:
        """The mapping a job's `process()` sees (the `State` of processor.job).

        A Protocol cannot say "is a MutableMapping" (that ABC is nominal), so the
        store hands out its mapping as a part of its own, with the stream clock
        (`now`, `following`) a job's entries expire by.
        """
        ...

    # A record's undo log: begin before each record, roll back a record that raised.
    begin_record: Callable[[], None]
    rollback_record: Callable[[], None]

    # The transaction.
    def commit(self, offsets: Offsets, changes: Changes | None = None) -> None: ...
    def abort(self) -> None: ...
    def sweep_expired(self, before: int, start: bytes, limit: int) -> bytes | None: ...
    def applied_offsets(self) -> dict[str, int]: ...

    # The changelog (catch_up.source = "changelog").
    def changes(self) -> Changes: ...
    def apply_changes(self, changes: Iterable[Change], offsets: Offsets) -> None: ...
    def apply_records(self, keys: Sequence[bytes], values: Sequence[bytes | None],
                      offsets: Offsets) -> None: ...
    def snapshot(self) -> Iterator[Change]: ...
    def clear(self) -> None: ...

    # Bulk ingest.
    def ingest(self, sst_paths: Sequence[str | os.PathLike[str]], *,
               move: bool = False) -> None: ...
    def ingest_items(self, items: Iterable[tuple[Key, Any]], offsets: Offsets) -> None: ...

    # Lifecycle.
    def approximate_bytes(self) -> int: ...
    def close(self) -> None: ...
    def destroy(self) -> None: ...
