"""The task runtime: every task this processor holds, in its role, driven by one loop.

One module per concept, behind this surface:

- `task_runtime`: `TaskRuntime`, the coordinator's API and the loop;
- `driver`: `TaskDriver`, the book of tasks, carrying out what the lifecycle table
  (processor/lifecycle.py) decides, a heartbeat reply's commands among them;
- `catch_up`: the catch-up source (input replay or changelog apply) and what differs;
  `tombstones`: whether a store away too long may have missed a changelog's deletes;
- `activation`: fence the previous owner and read T1 beside the loop (with the
  producers prepared for it), run the silent replays, go active;
- `active_round`, `replay_round`: a round's active batch and replay batch;
- `commits`: when and how the active tasks commit, side by side;
- `consumers`: the four consumers; `active_consumer` (assignment, expansion barriers,
  idle back-off), `replay_consumers` (replays, caps), `lookups` (offsets), `batches` (a
  batch grouped by task), `idle_fetch`, `metadata` (partition counts); `cut_off` and
  `consumer_watch`: a consumer cut off from the brokers, found and replaced;
- `task_partitions`: what each task reads; `children`, `child_release`: split children
  in their parents; `barriers`: the expansion barriers' view;
- `bulk_path`: the Spark bulk catch-up of a fresh replica's backlog;
- `stores`: the task stores, closed off the loop; `jobs`: one job instance per task;
- `dead_letters`: the dead-letter topic; `reports`: the task reports and their roles,
  store sizes;
- `preflight`: what the broker is asked before any task starts (transaction timeout,
  ACLs), so a refusal it would keep giving is named at once.
"""

from __future__ import annotations

from processor.runtime.activation import StoreAheadError
from processor.runtime.task_runtime import TaskRuntime

__all__ = ["StoreAheadError", "TaskRuntime"]
