"""The task runtime: every task this processor holds, in its role, driven by one loop.

One module per concept, behind this surface:

- `task_runtime`: `TaskRuntime`, the book of tasks and the poll loop;
- `reconciliation`: a heartbeat reply -> what to release, drop, start, activate;
- `activation`: fence the previous owner, replay T2 -> T1, go active;
- `consumers`: the two assign()-based consumers, replica caps, expansion barriers;
- `bulk_path`: the Spark bulk catch-up of a warmup's backlog;
- `changelog_source`: the changelog mapping, changelog replicas and writers;
- `reports`: the task reports of each heartbeat, store sizes for the scrape.
"""

from __future__ import annotations

from processor.runtime.activation import StoreAheadError
from processor.runtime.task_runtime import TaskRuntime

__all__ = ["StoreAheadError", "TaskRuntime"]
