"""`baton processor`: the processor daemon, the top of processor/.

- `main`: `run_processor`, the main loop that owns the task runtime (processor/runtime/),
  signals and shutdown;
- `heartbeat`: the heartbeat monitor thread, exchanging snapshots with the main loop;
- `health`: whether the processor is live and ready (`/healthz`, `/readyz`).
"""

from __future__ import annotations

from processor.daemon.main import ROUND_S, run_processor

__all__ = ["ROUND_S", "run_processor"]
