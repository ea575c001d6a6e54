"""How busy a processor's main loop is: the share of wall time it spent working
(processing, replaying, committing) rather than waiting for records. With the records/s
its active tasks handled, that is what the coordinator's autoscaling recommendation
estimates a processor's capacity from (orchestrator/core/autoscale.py).

The waits are what the loop's consumers and its idle sleep report: a `consume()` that
returns fewer records than it asked for waited out its timeout (librdkafka returns early
only with a full batch), so its whole duration counts as waiting; a full one counts as
work. The share is taken over at least `every_s`, so one quick round says little.
"""

from __future__ import annotations

from orchestrator.wire.clock import Clock

__all__ = ["LoadMeter"]


class LoadMeter:
    """The loop's busy share (0-1) over its last `every_s` or more; None before that."""

    def __init__(self, clock: Clock, every_s: float = 1.0) -> None:
        self._clock, self._every_s = clock, every_s
        self._since = clock.monotonic()
        self._waited_then = 0.0
        self.busy: float | None = None

    def update(self, waited_s: float) -> None:
        """`waited_s`: the loop's total time waiting so far (it only grows)."""
        now = self._clock.monotonic()
        elapsed = now - self._since
        if elapsed < self._every_s:
            return
        waited = waited_s - self._waited_then
        self.busy = round(min(1.0, max(0.0, 1.0 - waited / elapsed)), 3)
        self._since, self._waited_then = now, waited_s
