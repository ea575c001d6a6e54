"""Key -> partition functions, the same as the producers' (for split key filters).

A split moves the keys that the producers now send to a child partition; Baton must
pick exactly the partition the producers' partitioner picks, or a key's state and its
new records would end up in different tasks. `[job] partitioner` names it:

- ``consistent_random``: librdkafka's default (so confluent-kafka's): CRC-32 of the key
  modulo the partition count.
- ``murmur2_random``: the Java client's default: murmur2 of the key, its sign bit
  cleared, modulo the count.
- ``fnv1a_random``: FNV-1a (32 bit) of the key modulo the count.

``_random``: a record without a key has no home partition; the producers spread such
records at random, so Baton keeps them with the partition they arrived on (they carry
no per-key state to move). librdkafka's ``consistent_random`` also treats an empty key
(``b""``) as no key; the other two hash it. `home_partition` answers None for both.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Literal, get_args

__all__ = ["PARTITIONERS", "Partitioner", "PartitionerName", "home_partition", "partitioner",
           "state_key_bytes"]

PartitionerName = Literal["consistent_random", "murmur2_random", "fnv1a_random"]
PARTITIONERS: tuple[PartitionerName, ...] = get_args(PartitionerName)
Partitioner = Callable[[bytes, int], int]

_MASK32 = 0xFFFFFFFF
_MURMUR2_SEED = 0x9747B28C  # the Java client's seed
_MURMUR2_M = 0x5BD1E995
_FNV1A_OFFSET = 0x811C9DC5
_FNV1A_PRIME = 0x01000193


def consistent(key: bytes, count: int) -> int:
    """librdkafka's ``consistent``: crc32(key) % count."""
    return zlib.crc32(key) % count


def murmur2(key: bytes) -> int:
    """The Java client's murmur2 (32-bit, unsigned result)."""
    length = len(key)
    h = (_MURMUR2_SEED ^ length) & _MASK32
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = (key[i] | key[i + 1] << 8 | key[i + 2] << 16 | key[i + 3] << 24)
        k = (k * _MURMUR2_M) & _MASK32
        k ^= k >> 24
        k = (k * _MURMUR2_M) & _MASK32
        h = ((h * _MURMUR2_M) & _MASK32) ^ k
    rest = length % 4
    if rest == 3:
        h ^= key[whole + 2] << 16
    if rest >= 2:
        h ^= key[whole + 1] << 8
    if rest >= 1:
        h ^= key[whole]
        h = (h * _MURMUR2_M) & _MASK32
    h ^= h >> 13
    h = (h * _MURMUR2_M) & _MASK32
    h ^= h >> 15
    return h


def murmur2_partition(key: bytes, count: int) -> int:
    """The Java client's default partition: (murmur2 & 0x7fffffff) % count."""
    return (murmur2(key) & 0x7FFFFFFF) % count


def fnv1a(key: bytes) -> int:
    """32-bit FNV-1a."""
    h = _FNV1A_OFFSET
    for byte in key:
        h = ((h ^ byte) * _FNV1A_PRIME) & _MASK32
    return h


def fnv1a_partition(key: bytes, count: int) -> int:
    """librdkafka's ``fnv1a``: |fnv1a(key) as int32| % count (Sarama's choice)."""
    h = fnv1a(key)
    return abs(h - (1 << 32) if h >= 1 << 31 else h) % count


_BY_NAME: dict[str, Partitioner] = {
    "consistent_random": consistent,
    "murmur2_random": murmur2_partition,
    "fnv1a_random": fnv1a_partition,
}


def partitioner(name: str) -> Partitioner:
    """The function named by ``[job] partitioner``.

    Raises:
        ValueError: an unknown name (the config check names the key first).
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown partitioner {name!r}: expected one of "
                         f"{', '.join(PARTITIONERS)}") from None


def home_partition(name: str, key: bytes | None, count: int) -> int | None:
    """The partition the producers' partitioner `name` sends `key` to among `count`, or
    None when it would pick one at random (no key; an empty key for consistent_random)."""
    if key is None or (not key and name == "consistent_random"):
        return None
    return partitioner(name)(key, count)


def state_key_bytes(key: object) -> bytes | None:
    """A state key as the record key it came from (str keys were UTF-8 bytes), or None
    when it cannot have been a record key (then a split cannot tell where it belongs)."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    return None
