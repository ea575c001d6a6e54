"""Store errors an operator can act on, and the translation of RocksDB's.

RocksDB reports every failure as a bare Exception whose message starts with a status
("IO error: ...", "Corruption: ..."). We classify them once here so callers can tell a
store another process holds (wait or stop that process) from a damaged one (restore or
rebuild it); no code path ever wipes a store to get past either (a processor moves a
damaged one aside, kept: processor/runtime/stores.py).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "StoreError",
    "StoreLockedError",
    "StoreCorruptError",
    "open_error",
]


class StoreError(Exception):
    """A task store could not be opened, read or written; the message names the path."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(message)
        self.path = Path(path)


class StoreLockedError(StoreError):
    """Another process (or another open store in this one) holds the store's LOCK."""


class StoreCorruptError(StoreError):
    """The store's files are damaged; it is left untouched for the operator."""


_LOCK_MARKERS = ("lock hold by current process", "While lock file", "/LOCK:")
_CORRUPT_MARKERS = ("Corruption:", "No such file or directory", "MANIFEST")
# ENOSPC, as RocksDB and the OS word it: nothing is damaged, the store waits for space
_DISK_FULL = "No space left on device"


def open_error(path: Path, exc: BaseException) -> StoreError:
    """The StoreError for a failed open of the RocksDB at `path`."""
    cause = str(exc) or type(exc).__name__
    if _DISK_FULL in cause:     # before the corrupt markers: it may name the MANIFEST
        return StoreError(path, f"cannot open task store {path}: its disk is full ({cause})")
    if any(marker in cause for marker in _LOCK_MARKERS):
        return StoreLockedError(path, (
            f"task store {path} is locked by another open store ({cause}); "
            "another processor (or a stale one on this host) still runs this task: "
            "stop it, or point this processor at another state_dir"))
    if any(marker in cause for marker in _CORRUPT_MARKERS):
        return StoreCorruptError(path, (
            f"task store {path} is corrupt ({cause}); it was left untouched: "
            "move the directory aside to rebuild the task's state by catch-up, "
            "or restore it from a checkpoint"))
    return StoreError(path, f"cannot open task store {path}: {cause}")
