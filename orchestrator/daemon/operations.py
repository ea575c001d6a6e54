"""The operators' requests to the coordinator: status, plan, drain, forget, expand,
split; and the decisions `baton autoscale` reports."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from orchestrator.core import views
from orchestrator.core.autoscale import Recommendation
from orchestrator.core.split import SplitError
from orchestrator.daemon.growth import InputGrowth
from orchestrator.daemon.guarded_core import GuardedCore

__all__ = ["AUTOSCALE_DECISIONS_KEPT", "Operations"]

log = logging.getLogger("baton.coordinator.autoscale")

# the last decisions `baton status` shows (kept in memory: a coordinator that takes
# over starts with none, and its counters at 0)
AUTOSCALE_DECISIONS_KEPT = 20


class Operations:
    """Answers the operators' HTTP requests over the guarded core.

    Args:
        guard: the core behind its lock.
        growth: input growth (POST /expand).
        info: extra keys for /status (the coordinator's own URLs).
    """

    def __init__(self, guard: GuardedCore, growth: InputGrowth,
                 info: Mapping[str, Any] | None = None,
                 recommended: Callable[[], Recommendation | None] = lambda: None) -> None:
        self._guard = guard
        self._growth = growth
        self._info = dict(info or {})
        self._recommended = recommended
        self._decisions: deque[dict[str, Any]] = deque(maxlen=AUTOSCALE_DECISIONS_KEPT)

    def status(self) -> dict[str, Any]:
        with self._guard.lock:
            return {**views.status(self._guard.core.picture),
                    **views.recommendation(self._recommended()),
                    "autoscale_decisions": list(self._decisions), **self._info}

    def autoscale_decision(self, decision: Mapping[str, Any]) -> dict[str, Any]:
        """A decision `baton autoscale` made or finished (POST /autoscale/decisions):
        logged with its inputs, counted in baton_autoscale_decisions_total, and the last
        `AUTOSCALE_DECISIONS_KEPT` shown by `baton status`."""
        entry = {"at": round(time.time(), 3), **decision}
        log.info("autoscale decision %s %s: %s -> %s processors (%s): %s; inputs %s",
                 entry["direction"], entry["outcome"], entry.get("current"),
                 entry.get("target"), ", ".join(entry.get("processors", [])) or "-",
                 entry.get("reason", ""), entry.get("inputs", {}))
        with self._guard.lock:
            self._decisions.append(entry)
            metrics = self._guard.core.picture.metrics
            if metrics is not None:
                metrics.record_autoscale_decision(entry["direction"], entry["outcome"])
        return {"recorded": True, "kept": len(self._decisions)}

    def plan(self, add: Sequence[str], remove: Sequence[str]) -> dict[str, Any]:
        with self._guard.lock:
            return views.plan(self._guard.core.picture, add, remove)

    def drain(self, processor: str) -> dict[str, Any]:
        with self._guard.deciding():
            result = self._guard.core.drain(processor)
            self._guard.commit()
            return result

    def forget(self, processor: str) -> dict[str, Any]:
        """Remove a dead processor for good (POST /forget), persisted before the answer."""
        with self._guard.deciding():
            result = self._guard.core.forget(processor)
            self._guard.commit()
            return result

    def expand(self, topic: str, partitions: int) -> dict[str, Any]:
        """Grow an input topic and apply the expansion at once (POST /expand)."""
        return self._growth.expand(topic, partitions)

    def split(self, dry_run: bool) -> dict[str, Any]:
        """Split every task that can split (POST /split); record it unless `dry_run`.

        Idempotent: a second call finds nothing new to split and changes nothing.

        Raises:
            SplitError: the grouping cannot split (``single``).
        """
        core = self._guard.core
        if core.picture.config.catch_up_source != "input":
            raise SplitError(
                f"catch_up.source = {core.picture.config.catch_up_source!r}: a split child's "
                "state is in its parent's changelog partition, mixed with the keys the "
                "parent keeps, and Baton does not rebuild a child from it (yet); split "
                "with catch_up.source = \"input\" (the default: the child replays its "
                "parent's input through process()), then switch back: the children get "
                "changelog partitions of their own at the next coordinator start")
        with self._guard.lock:
            model, splits = core.picture.model.plan_split()
            if splits and not dry_run:
                self._guard.replies.publish()
                core.apply_split(model, splits)
                self._guard.commit()
            return {"splits": [s.to_json() for s in splits], "tasks": len(model.tasks),
                    "generation": model.generation, "recorded": bool(splits) and not dry_run}
