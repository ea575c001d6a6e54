"""The health endpoints every daemon answers, for the probes of a platform (a Kubernetes
liveness and readiness probe) and for operators; their paths are pinned
(docs/design.md, "What is pinned").

- `GET /healthz`: 200 while the process's loop turns; a platform restarts on failure.
- `GET /readyz`: 200 when the daemon can do its job: a processor registered with the
  coordinator and heard by it lately; a coordinator leading, or a standby that knows its
  leader. A platform routes traffic and counts disruptions by it, never restarts on it.

Both answer without a token (a probe carries none) and say nothing secret: a JSON
object `{"ok": bool, "detail": "..."}`. Each daemon decides with a pure function over
plain data (`processor.daemon.health`, `orchestrator.daemon.gate`); this module holds
the shared answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["HEALTH_PATHS", "LIVE_PATH", "READY_PATH", "Probe"]

LIVE_PATH = "/healthz"
READY_PATH = "/readyz"
HEALTH_PATHS = frozenset({LIVE_PATH, READY_PATH})


@dataclass(frozen=True)
class Probe:
    """One probe's answer: whether it holds, and why (for the operator reading it)."""

    ok: bool
    detail: str

    @property
    def status(self) -> int:
        """200 when it holds, 503 when not (the code every platform's probe reads)."""
        return 200 if self.ok else 503

    def body(self) -> bytes:
        return json.dumps({"ok": self.ok, "detail": self.detail}).encode()
