"""Shipping the job's own code (`[job] path`) to Spark executors.

An executor imports the job by its class path, in a Python worker the cluster starts:
the processor's sys.path does not travel, and on a standalone cluster the directory
may not exist on the worker's host. Each `[job] path` directory is therefore zipped
(its contents at the zip's root, as on sys.path) and added with
`SparkContext.addPyFile`, which puts the zip on every executor's sys.path (and the
driver's). A directory is shipped once per SparkContext; the zip's name carries a hash
of its contents, so new job code (a processor restarted after a deploy) ships anew.
The zips are written to a directory of the process's own (0700), removed when it
exits: a daemon that runs for months leaves no zip per deploy behind.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["JobCodeError", "code_directory", "ship_job_code", "zip_directory"]

_SKIPPED_DIRS = {"__pycache__", ".git", ".venv", ".mypy_cache", ".pytest_cache"}
_lock = threading.Lock()
_shipped: dict[tuple[int, str], str] = {}   # (id of the SparkContext, directory) -> zip
_directory: list[Path] = []                  # this process's directory of zips, once made


class JobCodeError(ValueError):
    """A `[job] path` directory that cannot be shipped (missing or unreadable)."""


def _files(directory: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        found.extend(Path(root) / name for name in sorted(names)
                     if not name.endswith((".pyc", ".pyo")))
    return found


def code_directory() -> Path:
    """The directory this process writes its zips to: made on first use, private to the
    process's user (0700), and removed when the process exits (a SIGKILLed one leaves
    it in the temp dir)."""
    with _lock:
        if not _directory:
            made = Path(tempfile.mkdtemp(prefix="baton-job-code-"))
            atexit.register(shutil.rmtree, made, True)
            _directory.append(made)
        return _directory[0]


def zip_directory(directory: Path, into: Path) -> Path:
    """`directory`'s files zipped under `into`, named by a hash of their contents."""
    if not directory.is_dir():
        raise JobCodeError(f"job.path {directory}: not a directory")
    files = _files(directory)
    digest = hashlib.sha256(str(directory).encode())
    for file in files:
        digest.update(str(file.relative_to(directory)).encode() + b"\0")
        digest.update(file.read_bytes())
    target = into / f"baton-job-{directory.name}-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        partial = target.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for file in files:
                archive.write(file, str(file.relative_to(directory)))
        partial.replace(target)
    return target


def ship_job_code(sc: Any, path: Sequence[str | Path]) -> list[str]:
    """Add each directory of `path` to `sc` as a zip of its code (once per context).

    Returns:
        The zips added by this call.

    Raises:
        JobCodeError: a directory is missing or unreadable.
    """
    added: list[str] = []
    into = code_directory()
    with _lock:
        for entry in path:
            directory = Path(entry).resolve()
            key = (id(sc), str(directory))
            if key in _shipped:
                continue
            try:
                archive = zip_directory(directory, into)
            except OSError as exc:
                raise JobCodeError(f"job.path {directory}: cannot zip it: {exc}") from None
            sc.addPyFile(str(archive))
            _shipped[key] = str(archive)
            added.append(str(archive))
    return added
