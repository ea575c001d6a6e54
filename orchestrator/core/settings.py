"""The coordinator core's settings, in seconds, read from the config's [job],
[coordinator] and [catch_up] sections."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.core import handoff as hs
from orchestrator.core.assignment import AssignmentConfig
from orchestrator.core.autoscale import AutoscalePolicy
from orchestrator.core.failures import DEFAULT_BACKOFF_S, DEFAULT_MAX_ATTEMPTS
from orchestrator.wire.config import Config

__all__ = ["CoreConfig"]


@dataclass(frozen=True)
class CoreConfig:
    """The settings the core uses, in seconds (from [job], [coordinator], [catch_up])."""

    job: str
    scheme: str = "partition"
    catch_up_source: str = "input"
    processor_timeout_s: float = 10.0
    assignment: AssignmentConfig = AssignmentConfig()
    handoff: hs.HandoffConfig = hs.HandoffConfig()
    # a processor that failed a task is excluded for it this long (doubled per attempt)
    failure_backoff_s: float = DEFAULT_BACKOFF_S
    # attempts per (task, processor) before that processor never gets the task again
    max_task_attempts: int = DEFAULT_MAX_ATTEMPTS
    # an expansion's barriers are settled this long after it was seen ([job]
    # expansion_grace_ms): how stale the producers' metadata may be
    expansion_grace_s: float = 300.0
    # [autoscale]: the recommendation's policy (orchestrator/core/autoscale.py)
    autoscale: AutoscalePolicy = AutoscalePolicy()
    # a dead processor is forgotten this long after it died ([coordinator]
    # forget_dead_after_ms); 0: only by an operator
    forget_dead_after_s: float = 0.0

    @classmethod
    def from_config(cls, config: Config) -> CoreConfig:
        """Build from an `orchestrator.wire.config.Config`."""
        c, k, a = config.coordinator, config.catch_up, config.autoscale
        return cls(
            job=config.job.name, scheme=config.job.grouping,
            catch_up_source=config.catch_up.source,
            processor_timeout_s=c.processor_timeout_ms / 1000,
            assignment=AssignmentConfig(k.acceptable_lag, k.max_warmups, k.num_standbys,
                                        k.balance_factor),
            handoff=hs.HandoffConfig(k.acceptable_lag, c.release_timeout_ms / 1000,
                                     c.activate_timeout_ms / 1000),
            failure_backoff_s=c.failure_backoff_ms / 1000,
            max_task_attempts=c.max_task_attempts,
            expansion_grace_s=config.job.expansion_grace_ms / 1000,
            forget_dead_after_s=c.forget_dead_after_ms / 1000,
            autoscale=AutoscalePolicy(
                a.min_processors, a.max_processors, a.target_utilization, a.max_lag_s,
                a.allow_expand, a.up_window_ms / 1000, a.down_window_ms / 1000,
                a.max_decisions_per_hour,
                # the split that must follow an expansion is refused then (the children's
                # state is in the parent's changelog partition)
                "a split needs catch_up.source = \"input\"" if k.source == "changelog"
                else ""))
