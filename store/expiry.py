"""Entries that expire (a TTL), judged by stream time: what they are on disk and when
they are gone.

Theory of operation
-------------------
* The clock is the timestamp of the record being processed (`state.now`), never the
  wall clock: every path that rebuilds a task's state (a warmup or standby replaying
  the input, the activation's replay to T1, a Spark fold, a split child's filtered
  replay) runs each key's records through `process()` in the order the owner did, with
  the same timestamps, so it finds the same entries expired at the same records. A
  task-wide clock (the largest timestamp seen) would not do: a split child and a Spark
  fold see only some keys' records, so their clock would pass an entry's expiry at
  another record than the owner's.
* An entry written with `put(key, value, ttl_ms=d)` by a record at time t expires at
  t + d: a record whose timestamp is at or past that reads it as absent (get, `[]`,
  `in`, iteration, scans, `len`). The first read of the job that finds it expired
  deletes it, through the state's ordinary delete: the delete joins the transaction,
  the changelog carries it as a tombstone, a rolled-back record undoes it, and a Spark
  fold drops the key. So a record with an older timestamp that comes later (out of
  order) finds it gone on every path alike, as the owner found it.
* Its encoding is the value's own behind a tag byte that no JSON text starts with and
  the expiry (milliseconds, 8 bytes big-endian, signed): a reader of plain JSON values
  meets it only on its rare, non-JSON path, so values without a TTL pay nothing.
* The value of an expiring entry reads back as a copy: a list or dict read from it is
  not the state's own (the write-back of store/_overlay.py would drop the expiry).
  Write it again with `put` (a new expiry) or with `state[key] = ...` (none).
"""

from __future__ import annotations

import struct
from typing import Any

from store.codec import decode_value, encode_value

__all__ = ["EXPIRING_TAG", "decode_expiring", "encode_expiring", "expires_at", "expiry_of",
           "is_expired"]

# starts an expiring entry; never the first byte of a JSON text, nor the big-int fallback's
EXPIRING_TAG = b"\x02"
_STAMP = struct.Struct(">q")
_HEAD = len(EXPIRING_TAG) + _STAMP.size


def expires_at(now: int | None, ttl_ms: int) -> int:
    """When an entry written now with `ttl_ms` expires.

    Raises:
        ValueError: `ttl_ms` is not a positive int, or there is no record time (a write
            outside `process()`).
    """
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
        raise ValueError(f"ttl_ms must be a positive int (milliseconds), got {ttl_ms!r}")
    if now is None:
        raise ValueError("an entry with a TTL expires in stream time, counted from the "
                         "timestamp of the record being processed: there is none yet "
                         "(write it from process(), or set state.now first)")
    return now + ttl_ms


def encode_expiring(value: Any, expiry: int) -> bytes:
    """The stored form of `value` expiring at `expiry` (ms).

    Raises:
        TypeError: the value is not JSON-able.
    """
    return EXPIRING_TAG + _STAMP.pack(expiry) + encode_value(value)


def expiry_of(raw: bytes) -> int | None:
    """The expiry of a stored value, or None for a value without a TTL."""
    if raw[:1] != EXPIRING_TAG:
        return None
    return int(_STAMP.unpack_from(raw, 1)[0])


def is_expired(raw: bytes, now: int | None) -> bool:
    """Whether the stored value `raw` reads as absent to a record at time `now` (no
    record yet: nothing has expired)."""
    return (now is not None and raw[:1] == EXPIRING_TAG
            and _STAMP.unpack_from(raw, 1)[0] <= now)


def decode_expiring(raw: bytes) -> Any:
    """The value of a stored value, with or without a TTL."""
    if raw[:1] == EXPIRING_TAG:
        return decode_value(raw[_HEAD:])
    return decode_value(raw)
