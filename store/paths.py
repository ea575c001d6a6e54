"""Where a task's store lives, and the checks made before RocksDB touches a directory.

RocksDB with create_if_missing would happily start an empty database beside the
remains of one whose CURRENT file was lost; the checks here refuse that instead, so
state is never replaced silently.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

from store.errors import StoreCorruptError, StoreError

__all__ = ["task_store_path", "safe_dir_name", "prepare_db_dir", "move_aside"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
# Longest name kept whole; longer ones are cut and hashed (filesystems allow 255 bytes).
_MAX_NAME = 100
# Separates a hash suffix; outside the safe set, so an unchanged name never contains it
# and a changed name can never equal an unchanged one.
_HASH_SEP = "+"
_HASH_BYTES = 4
_DATA_SUFFIXES = (".sst", ".log", ".blob")


def safe_dir_name(name: str) -> str:
    """`name` as one safe directory name, injective up to a 32-bit hash.

    Characters outside [A-Za-z0-9._-] become '_'; when anything changed (or the name is
    empty, '.', '..' or too long) a short hash of the original is appended.
    """
    cleaned = _UNSAFE.sub("_", name)
    if cleaned == name and name not in ("", ".", "..") and len(name) <= _MAX_NAME:
        return name
    digest = hashlib.blake2s(name.encode("utf-8", "surrogatepass"),
                             digest_size=_HASH_BYTES).hexdigest()
    return f"{cleaned[:_MAX_NAME]}{_HASH_SEP}{digest}"


def task_store_path(state_dir: str | os.PathLike[str], job: str, task: str,
                    processor: str | None = None) -> Path:
    """The store directory of `task` of `job` on `processor`:
    `<state_dir>/<job>/<processor>/<task>/` (without a processor, the layout before it:
    `<state_dir>/<job>/<task>/`), names sanitised.

    Example: task_store_path("state", "sums", "Partition 0", "p1")
    -> state/sums/p1/Partition_0+<hash>.
    """
    base = Path(state_dir) / safe_dir_name(job)
    if processor is not None:
        base = base / safe_dir_name(processor)
    return base / safe_dir_name(task)


def prepare_db_dir(path: Path) -> bool:
    """Make sure `path` can hold a store; True if a new store may be created there.

    Raises:
        StoreError: `path` is a file, cannot be created, or is not writable.
        StoreCorruptError: `path` holds data files but no CURRENT (a damaged store).
    """
    try:
        _make_writable_dir(path)
        if (path / "CURRENT").exists():
            return False
        _refuse_orphaned_data(path)
    except OSError as exc:
        raise StoreError(path, (
            f"cannot use task store directory {path}: {exc}; "
            "fix its permissions or choose another state_dir")) from exc
    return True


def _make_writable_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise StoreError(path, (
            f"task store path {path} is a file, not a directory: "
            "move it away or choose another state_dir"))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(path, (
            f"cannot create task store directory {path}: {exc}; "
            "fix the permissions of its parent or choose another state_dir")) from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise StoreError(path, (
            f"task store directory {path} is not writable by this user: "
            "fix its permissions or choose another state_dir"))


def _refuse_orphaned_data(path: Path) -> None:
    """Data files without CURRENT: RocksDB would start over and hide them."""
    orphans = sorted(p.name for p in path.iterdir() if p.name.endswith(_DATA_SUFFIXES))
    if orphans:
        raise StoreCorruptError(path, (
            f"task store {path} is corrupt: it has data files ({', '.join(orphans[:5])}) "
            "but no CURRENT file; it was left untouched: move the directory aside to "
            "rebuild the task's state by catch-up, or restore it from a checkpoint"))


def move_aside(path: Path, now: float | None = None, label: str = "corrupt") -> Path:
    """Rename the damaged store `path` next to itself, named with `label` and the UTC
    time (`<task>+corrupt-20260101T120000Z`), and return the new path: it is kept for the
    operator, never deleted, and `path` is free for a store rebuilt by catch-up. The
    `+` keeps the name out of the task names' safe set (see `safe_dir_name`).

    Raises:
        StoreError: the rename failed (the store stays where it was).
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    aside = path.with_name(f"{path.name}+{label}-{stamp}")
    serial = 1
    while aside.exists():       # damaged twice within a second
        serial += 1
        aside = path.with_name(f"{path.name}+{label}-{stamp}-{serial}")
    try:
        path.rename(aside)
    except OSError as exc:
        raise StoreError(path, f"cannot move task store {path} aside: {exc}") from exc
    return aside
