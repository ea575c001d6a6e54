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
every minute (orchestrator/wire/collector.py).

Large blocks are the other half. glibc serves a request of `MMAP_THRESHOLD` or more with
a mapping of its own, unmapped when freed, so it never fragments an arena; but it raises
that threshold to the size of each mapped block freed (up to 32 MiB), to spare the
system calls. A processor frees such blocks from its first minute: a flushed memtable's
arena blocks, a large fetch's buffers. From then on the same sizes are carved out of the
arenas, where what stays live beside them after a burst keeps the space from ever being
trimmed. A processor therefore fixes the threshold at glibc's own starting value, which
also ends the sliding.

`MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_` or `GLIBC_TUNABLES` in the environment win
over these settings: an operator's choice is kept as glibc read it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

__all__ = ["ARENAS", "MMAP_THRESHOLD", "shape_heap", "trim"]

# two arenas: the main loop's and one its C threads share; each thread keeps a small
# cache of its own (tcache), so sharing costs little on a two- to four-core host
ARENAS = 2
# blocks of this size or more get a mapping of their own: glibc's starting value, fixed
MMAP_THRESHOLD = 128 * 1024
# mallopt's parameter numbers (glibc's malloc.h)
_M_ARENA_MAX = -8
_M_MMAP_THRESHOLD = -3


def _libc_function(name: str) -> Callable[..., int] | None:
    """A glibc function, or None where the C library has none (musl, macOS)."""
    try:
        function: Callable[..., int] = getattr(ctypes.CDLL(None), name)
    except (AttributeError, OSError):
        return None
    return function


_malloc_trim = _libc_function("malloc_trim")
_mallopt = _libc_function("mallopt")


def _operator_set(variable: str, tunable: str) -> bool:
    """Whether the environment sets this parameter, by its variable or glibc's tunable."""
    return variable in os.environ or tunable in os.environ.get("GLIBC_TUNABLES", "")


def shape_heap(arenas: int = ARENAS, mmap_threshold: int = MMAP_THRESHOLD) -> dict[str, bool]:
    """Keep this process to `arenas` malloc arenas and map blocks of `mmap_threshold`
    bytes or more on their own; call before any thread starts.

    Returns which of the two were set (`"arenas"`, `"mmap_threshold"`): neither where
    glibc is absent, and not one the environment sets (the operator's value stands).
    """
    done = {"arenas": False, "mmap_threshold": False}
    if _mallopt is None:
        return done
    if not _operator_set("MALLOC_ARENA_MAX", "glibc.malloc.arena_max"):
        done["arenas"] = bool(_mallopt(_M_ARENA_MAX, arenas))
    if not _operator_set("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"):
        done["mmap_threshold"] = bool(_mallopt(_M_MMAP_THRESHOLD, mmap_threshold))
    return done


def trim() -> None:
    """Give every arena's whole free pages back to the system (under a millisecond on a
    processor's heap); nothing where glibc is absent."""
    if _malloc_trim is not None:
        _malloc_trim(0)
