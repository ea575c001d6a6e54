"""Whether a processor is live and ready (`/healthz`, `/readyz` on its metrics
address; orchestrator/wire/health.py), decided over plain numbers.

Live: its main loop came round within half of `processor.loop_timeout_ms`. The loop
comes round about once a second; one stuck in a call that never returns ends the
processor itself (exit 3) at the whole timeout, so a platform's probe restarts it no
sooner than Baton would, and sees it first only when the processor cannot end itself.

Ready: registered with the coordinator and heard by it within
`processor.coordinator_grace_ms`, and not told it is dead. A processor the
coordinator cannot hear keeps processing (exactly-once rests on fencing, not on
reachability), so not ready is no reason to restart it: it is for the platform's
counting of disruptions (a PodDisruptionBudget waits for it) and for operators.
"""

from __future__ import annotations

from orchestrator.wire.health import Probe

__all__ = ["live", "ready"]


def live(loop_age_s: float, loop_timeout_s: float) -> Probe:
    """`loop_age_s`: since the main loop last came round (0 once it has ended: a stop
    takes as long as its releases need)."""
    if loop_age_s <= loop_timeout_s / 2:
        return Probe(True, "the main loop turns")
    return Probe(False, f"the main loop has not come round for {loop_age_s:.0f}s "
                        f"(half of processor.loop_timeout_ms is {loop_timeout_s / 2:.0f}s)")


def ready(registered: bool, heard_age_s: float, grace_s: float, dead: bool) -> Probe:
    """`heard_age_s`: since the coordinator last answered a heartbeat."""
    if dead:
        return Probe(False, "the coordinator declared this execution dead: it is stopping")
    if not registered:
        return Probe(False, "not registered with the coordinator yet")
    if heard_age_s > grace_s:
        return Probe(False, f"no heartbeat answered for {heard_age_s:.0f}s "
                            "(processor.coordinator_grace_ms); tasks keep processing")
    return Probe(True, "registered, and heard by the coordinator")
