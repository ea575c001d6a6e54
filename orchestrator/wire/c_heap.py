"""The C heap under a daemon: how many glibc arenas it keeps, and when their free pages
go back to the system.

A processor's C memory is librdkafka's and RocksDB's. Both allocate from many threads
(a client's broker threads, a store's flush and compaction threads), and glibc gives
each new thread an arena of its own, up to eight per core. Each arena keeps
what was freed in it, scattered between live blocks, until a trim hands whole free pages
back (`malloc_trim`, which walks every arena). Over an hour of handoffs and broker
restarts, a processor's RSS rose 1-2 MB every ten minutes in those arenas while Python's
own memory stayed flat, and a broker restart's burst of new clients lifted it 5-25 MB
until the next trim (docs/performance.md, "Soak").

So a processor limits itself to `ARENAS` arenas before its first thread starts (glibc
fixes the limit when it makes its first extra arena), and its collector trims the heap
every minute (orchestrator/wire/collector.py). `MALLOC_ARENA_MAX` in the environment
wins over the limit: an operator's setting is kept as glibc read it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

__all__ = ["ARENAS", "limit_arenas", "trim"]

# two arenas: the main loop's and one its C threads share; each thread keeps a small
# cache of its own (tcache), so sharing costs little on a two- to four-core host
ARENAS = 2
# mallopt's parameter number for the arena limit (glibc's malloc.h)
_M_ARENA_MAX = -8


def _libc_function(name: str) -> Callable[..., int] | None:
    """A glibc function, or None where the C library has none (musl, macOS)."""
    try:
        function: Callable[..., int] = getattr(ctypes.CDLL(None), name)
    except (AttributeError, OSError):
        return None
    return function


_malloc_trim = _libc_function("malloc_trim")
_mallopt = _libc_function("mallopt")


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Keep this process to `arenas` malloc arenas; call before any thread starts.

    Returns whether the limit was set: not where glibc is absent, nor where
    `MALLOC_ARENA_MAX` is in the environment (the operator's limit stands).
    """
    if _mallopt is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(_mallopt(_M_ARENA_MAX, arenas))


def trim() -> None:
    """Give every arena's whole free pages back to the system (under a millisecond on a
    processor's heap); nothing where glibc is absent."""
    if _malloc_trim is not None:
        _malloc_trim(0)
