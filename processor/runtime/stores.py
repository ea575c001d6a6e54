"""The task stores this processor opens, and closes off the main loop.

Closing a store flushes its memtable (100-200 ms at 250,000 keys under load) with the
GIL released: a released task's store is closed on a thread at the next round, after
the release is reported, so the new owner's activation (and the handoff pause) does not
wait for it, and the tasks still active here go on meanwhile.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from orchestrator.wire.config import Config
from store import Store, TaskStore, task_store_path

__all__ = ["TaskStores"]


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

    def open(self, task: str, reads: bool = True) -> Store:
        """`task`'s store, once every released store has closed (it may be one of them);
        `reads`: whether anything will read it (a changelog apply only writes)."""
        self.close_released()
        path = task_store_path(self._config.state_dir, self._config.job.name, task,
                               self._processor_id)
        return TaskStore(Path(path), reads=reads)

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
