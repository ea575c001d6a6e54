"""Whose stores are where: `<state_dir>/<job>/<processor id>/<task>/`, one live owner.

Several processors on one host may share a config and so a `state_dir`: the processor id
in the path keeps their stores apart. Two executions of the *same* id on one state dir
would open the same stores; the second is refused at start by a lock file the live one
holds (an advisory `flock`, released by the kernel when its process dies, so a crash
never leaves a stale lock). Stores of the layout before the processor id
(`<state_dir>/<job>/<task>/`) are moved under the first processor that starts there:
they are caches of replayable state, so whichever processor adopts them only starts
warmer.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path
from typing import IO

from store.errors import StoreError
from store.paths import safe_dir_name

__all__ = ["ProcessorDirLocked", "ProcessorStateDir", "processor_state_dir"]

log = logging.getLogger("baton.store")

_LOCK_FILE = ".baton-processor.lock"
_ADOPT_LOCK = ".baton-adopt.lock"


class ProcessorDirLocked(StoreError):
    """Another live execution of this processor id holds its state directory."""


def processor_state_dir(state_dir: str | os.PathLike[str], job: str, processor: str) -> Path:
    """`<state_dir>/<job>/<processor>/`, names sanitised like task directories."""
    return Path(state_dir) / safe_dir_name(job) / safe_dir_name(processor)


class ProcessorStateDir:
    """This execution's hold on its processor's state directory (a context manager).

    Args:
        state_dir: `processor.state_dir`.
        job: the job's name.
        processor: the processor id.
        execution: this execution's id (named to whoever is refused).
    """

    def __init__(self, state_dir: str | os.PathLike[str], job: str, processor: str,
                 execution: str) -> None:
        self.path = processor_state_dir(state_dir, job, processor)
        self.job_dir = self.path.parent
        self.execution = execution
        self._file: IO[str] | None = None

    def __enter__(self) -> ProcessorStateDir:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> None:
        """Lock the directory (creating it), then adopt old-layout stores.

        Raises:
            ProcessorDirLocked: another live execution holds it; the message names both.
            StoreError: the directory cannot be created or locked.
        """
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            handle = open(self.path / _LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise StoreError(self.path, f"cannot use state directory {self.path}: {exc}; "
                             "fix its permissions or choose another state_dir") from exc
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "an unknown execution"
            handle.close()
            raise ProcessorDirLocked(self.path, (
                f"state directory {self.path} is in use by another execution of this "
                f"processor id ({holder}); stop it first, or start this one with another "
                "--id") ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"execution {self.execution}, pid {os.getpid()}, since "
                     f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
        handle.flush()
        self._file = handle
        self._adopt_old_layout()

    def release(self) -> None:
        if self._file is not None:
            self._file.close()      # closing drops the flock
            self._file = None

    def _adopt_old_layout(self) -> None:
        """Move `<state_dir>/<job>/<task>/` stores (RocksDB dirs) under this processor."""
        with open(self.job_dir / _ADOPT_LOCK, "a", encoding="utf-8") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)       # two processors starting together
            for entry in sorted(self.job_dir.iterdir()):
                if not entry.is_dir() or not (entry / "CURRENT").exists():
                    continue
                target = self.path / entry.name
                if target.exists():
                    log.warning("old-layout store %s left in place: %s already exists",
                                entry, target)
                    continue
                entry.rename(target)
                log.info("moved store %s to %s (state layout with the processor id)",
                         entry, target)
