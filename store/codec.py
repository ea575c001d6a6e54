"""How state keys, values and metadata become RocksDB bytes.

Layout of the key space (ordered bytewise, so iteration order is by encoded key):

    b"\\x00" + ...        metadata (applied offsets); never shown by iteration
    b"\\x01" + key        a bytes key, as is
    b"\\x02" + key.utf8   a str key

A changelog record (catch_up.source = "changelog") is a store entry as is: its key is
an encoded key of this layout and its value the encoded value (None: a delete). Besides
the state writes of a transaction, the changelog carries the input offsets that
transaction committed, as applied-offset entries (`changelog_offset_record`), so a store
rebuilt from the changelog holds state and input offsets that belong together.

The one-byte type tag makes b"a" and "a" distinct keys that each come back as their
own type. Values are JSON (orjson); integers beyond 64 bits, which orjson refuses, fall
back to the stdlib encoder behind a tag byte that is never valid JSON, so the fast path
pays nothing for them.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

__all__ = [
    "Key",
    "META_PREFIX",
    "BYTES_TAG",
    "STR_TAG",
    "DATA_END",
    "OFFSET_PREFIX",
    "OFFSET_END",
    "encode_key",
    "decode_key",
    "encode_value",
    "decode_value",
    "offset_key",
    "encode_offsets",
    "decode_offset_item",
    "encode_changelog",
    "decode_changelog",
    "changelog_offset_record",
    "changelog_offset",
    "check_changelog_key",
    "rare_keys",
]

Key = bytes | str

META_PREFIX = b"\x00"
BYTES_TAG = b"\x01"
STR_TAG = b"\x02"
# First encoded key past all data keys: the exclusive upper bound of data iteration.
DATA_END = b"\x03"
OFFSET_PREFIX = META_PREFIX + b"offset:"
OFFSET_END = META_PREFIX + b"offset;"  # exclusive upper bound of the offset keys

# Marks a value encoded by the stdlib fallback; 0x01 can never start a JSON text.
_FALLBACK_TAG = b"\x01"
_BIG_INT_ERROR = "64-bit"


def encode_key(key: Key) -> bytes:
    """Encode a state key; bytes and str keys get distinct type tags.

    Raises:
        TypeError: the key is neither bytes nor str (e.g. None, for a record without key).
    """
    if isinstance(key, bytes):
        return BYTES_TAG + key
    if isinstance(key, str):
        return STR_TAG + key.encode()
    if isinstance(key, bytearray | memoryview):
        return BYTES_TAG + bytes(key)
    hint = "; an int key must be made a str (str(key)): ints are not state keys, so 1 " \
        "and '1' cannot be mistaken" if isinstance(key, int) else ""
    raise TypeError(f"state keys must be bytes or str, got {type(key).__name__}: {key!r}"
                    f"{hint}")


def decode_key(raw: bytes) -> Key:
    """Invert `encode_key`."""
    tag = raw[:1]
    if tag == BYTES_TAG:
        return raw[1:]
    if tag == STR_TAG:
        return raw[1:].decode()
    raise ValueError(f"not a data key (tag {tag!r}): {raw!r}")


def encode_value(value: Any) -> bytes:
    """Encode a JSON-able value (orjson; big integers through the stdlib).

    Raises:
        TypeError: the value is not JSON-able (orjson.JSONEncodeError is a TypeError).
    """
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        return _encode_fallback(value, exc)


def _encode_fallback(value: Any, exc: TypeError) -> bytes:
    """Integers beyond 64 bits: stdlib JSON behind a tag; anything else re-raises."""
    if _BIG_INT_ERROR not in str(exc):
        raise exc
    return _FALLBACK_TAG + json.dumps(value, allow_nan=False).encode()


def decode_value(raw: bytes) -> Any:
    """Invert `encode_value`."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        if raw[:1] == _FALLBACK_TAG:
            return json.loads(raw[1:])
        raise


def offset_key(partition: str) -> bytes:
    """The metadata key holding the applied offset of `partition` ("topic:N").

    Raises:
        ValueError: `partition` is not of the form "topic:N".
    """
    topic, sep, number = str(partition).rpartition(":")
    if not (isinstance(partition, str) and sep and topic and number.isdigit()):
        raise ValueError(f"partition must be written 'topic:N', got {partition!r}")
    return OFFSET_PREFIX + partition.encode()


def encode_offsets(offsets: Mapping[str, int]) -> list[tuple[bytes, bytes]]:
    """Metadata (key, value) pairs for applied offsets (next offset to apply, >= 0).

    Raises:
        ValueError: a partition name is malformed or an offset is not a non-negative int.
    """
    out = []
    for partition, offset in offsets.items():
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(
                f"applied offset of {partition} must be an int >= 0, got {offset!r}")
        out.append((offset_key(partition), str(offset).encode()))
    return out


def decode_offset_item(raw_key: bytes, raw_value: bytes) -> tuple[str, int]:
    """Invert one pair of `encode_offsets`."""
    return raw_key[len(OFFSET_PREFIX):].decode(), int(raw_value)


def encode_changelog(key: Key, value: Any) -> tuple[bytes, bytes | None]:
    """The changelog record of a state write: (encoded state key, JSON value or None).

    The key is the store's encoding (type tag + key bytes), so bytes and str state keys
    survive the round trip; value None means the key was deleted.
    """
    return encode_key(key), None if value is None else encode_value(value)


def decode_changelog(raw_key: bytes | None, raw_value: bytes | None
                     ) -> tuple[Key, bytes | None]:
    """(state key, encoded value or None for a delete) of a changelog record.

    Raises:
        ValueError: the record has no key (changelog keys are state keys).
    """
    if raw_key is None:
        raise ValueError("a changelog record has no key; changelog keys are state keys")
    return decode_key(raw_key), raw_value


def changelog_offset_record(partition: str, offset: int) -> tuple[bytes, bytes]:
    """The changelog record of an input offset a transaction committed: the store's own
    applied-offset entry, so applying it is writing it.

    Raises:
        ValueError: a malformed partition name or offset.
    """
    return encode_offsets({partition: offset})[0]


def changelog_offset(raw_key: bytes, raw_value: bytes | None) -> tuple[str, int] | None:
    """("topic:N", next offset) of an offset record, or None for a state record.

    Raises:
        ValueError: an offset record without a valid value.
    """
    if not raw_key.startswith(OFFSET_PREFIX):
        return None
    if raw_value is None or not raw_value.isdigit():
        raise ValueError(f"changelog offset record {raw_key!r} has no valid offset: "
                         f"{raw_value!r}")
    return decode_offset_item(raw_key, raw_value)


def check_changelog_key(raw_key: bytes | None) -> bytes:
    """`raw_key` if a changelog record may carry it: a state key or an applied offset.

    Raises:
        ValueError: no key, or a key of neither kind (not written by a Baton task).
    """
    if raw_key is None:
        raise ValueError("a changelog record has no key; changelog keys are state keys")
    tag = raw_key[:1]
    if tag == BYTES_TAG or tag == STR_TAG or raw_key.startswith(OFFSET_PREFIX):
        return raw_key
    raise ValueError(f"not a changelog key (tag {tag!r}): {raw_key[:64]!r}; was this "
                     f"partition written by something other than a Baton task?")


_FIRST_BYTE = operator.itemgetter(0)
_RARE_TAG = re.compile(b"[^" + re.escape(BYTES_TAG + STR_TAG) + b"]")


def rare_keys(raw_keys: Sequence[bytes | None]) -> list[int]:
    """Where in a batch of changelog keys the ones that are not state keys are (applied
    offsets, or foreign): changelog apply is a per-record hot path, so the keys' first
    bytes are gathered and searched in C, and only the rare ones are named in Python."""
    try:
        tags = bytes(map(_FIRST_BYTE, raw_keys))    # type: ignore[arg-type]
    except (TypeError, IndexError):                 # a key that is None or empty
        return [i for i, key in enumerate(raw_keys)
                if not key or key[:1] not in (BYTES_TAG, STR_TAG)]
    return [m.start() for m in _RARE_TAG.finditer(tags)]
