"""The task stores this processor opens, and closes off the main loop.

Closing a store flushes its memtable (long for a large store: docs/performance.md,
"Measurements behind the code") with the GIL released: a released task's store is
closed on a thread at the next round, after the release is reported, so the new owner's
activation (and the handoff pause) does not wait for it, and the tasks still active
here go on meanwhile.

A store is a cache of its task's state: the first time this processor opens it, it is
read whole with checksums verified (`[store] verify_on_open`), as RocksDB checks a table
file's blocks only when it reads them. A damaged store (found then, or by RocksDB at
open) is moved aside, never deleted, and an empty one takes its place: its catch-up
rebuilds the state from S2 or the changelog, so damaged bytes are never served.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from orchestrator.wire.config import Config
from store import Store, StoreCorruptError, TaskStore, task_store_path
from store.options import StoreMemory
from store.paths import move_aside

__all__ = ["TaskStores"]

log = logging.getLogger(__name__)


class TaskStores:
    """Opens each task's store; closes released ones on the closer thread.

    Args:
        config: the job's configuration (state directory, job name).
        processor_id: this processor's stable id (its stores' directory).
    """

    def __init__(self, config: Config, processor_id: str) -> None:
        self._config = config
        self._processor_id = processor_id
        self._closing: list[Store] = []     # released tasks' stores, closed next round
        self._closer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="baton-close")
        self._closes: list[Future[None]] = []
        limits = config.store
        self._memory = StoreMemory(block_cache_bytes=limits.block_cache_mb << 20,
                                   write_buffer_bytes=limits.write_buffer_mb << 20,
                                   max_write_buffers=limits.max_write_buffers,
                                   max_open_files=limits.max_open_files,
                                   memtable_bytes=limits.memtables_mb << 20)
        self._verified: set[str] = set()    # tasks whose store was read whole here

    def open(self, task: str, reads: bool = True) -> Store:
        """`task`'s store, once every released store has closed (it may be one of them);
        `reads`: whether anything will read it (a changelog apply only writes). A
        damaged store is moved aside and an empty one returned (see the module doc).

        Raises:
            StoreError: the store cannot be opened (locked, a file in its place, ...),
                or a damaged one cannot be moved aside.
        """
        self.close_released()
        path = self._path(task)
        try:
            store = self._open_verified(task, path, reads)
        except StoreCorruptError as exc:
            aside = move_aside(path)
            log.error("task %r: damaged store moved to %s, not served; catch-up rebuilds "
                      "its state: %s", task, aside, exc)
            store = TaskStore(path, reads=reads, memory=self._memory,
                              wal=self._config.store.write_ahead_log)
        self._verified.add(task)
        return store

    def replace(self, task: str, store: Store, why: str) -> Store:
        """Close `task`'s `store`, move it aside (kept, never served again) and return an
        empty one in its place: its catch-up rebuilds the state; `why` is logged.

        Raises:
            StoreError: the store cannot be moved aside or the new one opened.
        """
        store.close()
        path = self._path(task)
        aside = move_aside(path, label="void")
        log.error("task %r: store moved to %s, not served; catch-up rebuilds its state: %s",
                  task, aside, why)
        return TaskStore(path, reads=True, memory=self._memory,
                         wal=self._config.store.write_ahead_log)

    def _path(self, task: str) -> Path:
        return Path(task_store_path(self._config.state_dir, self._config.job.name, task,
                                    self._processor_id))

    def _open_verified(self, task: str, path: Path, reads: bool) -> TaskStore:
        store = TaskStore(path, reads=reads, memory=self._memory,
                          wal=self._config.store.write_ahead_log)
        if self._config.store.verify_on_open and task not in self._verified:
            try:
                store.db.verify()
            except BaseException:
                store.close()
                raise
        return store

    def memory_usage(self) -> dict[str, int]:
        """The bytes every store shares: "block_cache" and "memtables" (any thread)."""
        return self._memory.usage()

    def close_later(self, store: Store) -> None:
        """Close `store` at the next round, on the closer thread."""
        self._closing.append(store)

    def close_released(self, wait: bool = True) -> None:
        """Close the released tasks' stores on the closer thread; with `wait`, until every
        close is done."""
        while self._closing:
            self._closes.append(self._closer.submit(self._closing.pop().close))
        for done in [f for f in self._closes if wait or f.done()]:
            self._closes.remove(done)
            done.result()

    def close(self) -> None:
        self.close_released()
        self._closer.shutdown(wait=True)
