"""Whether the state directory's disk has room for more tasks.

A store that cannot write fails its task (a full disk is no reason to stop the others),
and the coordinator places the task elsewhere. Without more, it would place other tasks
on this processor, each failing at once and spending its attempts (`max_task_attempts`)
while the disk is full; so each heartbeat says whether the disk is short of space
(`[processor] min_free_disk_mb`), and the coordinator gives a processor that is no new
task until it has room again.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

__all__ = ["StateDisk"]

log = logging.getLogger("baton.processor")


class StateDisk:
    """The free space of the disk holding a processor's state directory.

    Args:
        state_dir: the processor's state directory (it exists while the processor runs).
        min_free_bytes: below this the disk counts as full; 0: never.
    """

    def __init__(self, state_dir: Path, min_free_bytes: int) -> None:
        self._state_dir = state_dir
        self._min_free = min_free_bytes
        self._full = False

    def full(self) -> bool:
        """Whether the disk is short of space now (logged when that changes)."""
        if self._min_free <= 0:
            return False
        try:
            free = shutil.disk_usage(self._state_dir).free
        except OSError as exc:      # the directory went away: say so, claim no room
            free = 0
            log.error("cannot read the free space of %s: %s", self._state_dir, exc)
        full = free < self._min_free
        if full != self._full:
            if full:
                log.error("the disk of %s has %d MiB free, below [processor] "
                          "min_free_disk_mb = %d: this processor takes no new task until "
                          "there is room again", self._state_dir, free >> 20,
                          self._min_free >> 20)
            else:
                log.info("the disk of %s has %d MiB free again: this processor takes "
                         "tasks again", self._state_dir, free >> 20)
            self._full = full
        return full
