"""Processor daemon: the Job API, the task runtime, exactly-once output.

In layers, each importing only its own and those below it (tests/test_layers.py):

1. the per-task pieces, at this package's root: the Job API (`job`, the key and value
   formats in `formats`, the executors' `jobspec`), the active task
   (`active`, `outputs`), replicas (`replica`), the changelog writer and applier
   (`changelog`, `changelog_replica`), replay sources (`sources`), timers (`timers`),
   windows (`windows`) and the job authors' helpers (`testing`, `examples`, `oracle`);
2. `spark/`: the Spark bulk catch-up and audit over those pieces;
3. `runtime/`: every task of one processor, in its role, driven by one loop;
4. `daemon/`: `baton processor`, the main loop and the heartbeat monitor.
"""

from __future__ import annotations

from processor.job import Context, Emitted, Job, Output, Record, State, new_job
from processor.timers import Timer

__all__ = ["Context", "Emitted", "Job", "Output", "Record", "State", "Timer", "new_job"]
