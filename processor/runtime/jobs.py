"""The job instances of a processor's tasks: one per task, from its arrival to its leaving.

The instance is seen through the job's key and value formats (processor/formats.py).
A task arrives here as a warmup or standby (`start_replica`) or straight into its
activation; the instance made then (`processor.job.new_job`: `params` set, `setup`
called with the role it arrived in) serves the task through its replay, activation and
active life, so a client the job opened in `setup` is opened once. Its context reads
the task's current role from the task's `TaskHost` (processor/effects.py), which `get`
points at the active task's effects when the task goes active and away from them when
it replays again (a replica after a failure): `context.replaying` and
`context.after_commit` follow the role, not the role at setup. It is closed when the
task leaves: released, dropped, stopped on a failure (a restart makes a new one), or
the processor stops; its job metrics' series go with it. A `close` that raises is
logged, never fatal: the task's state and offsets are already where they belong.

A job with timers is seen through a `TimedJob` (processor/timers.py) around its
formats: timers keep the records' raw keys, which a split needs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from metrics import JobMetricSet
from orchestrator.wire.config import Config
from processor.effects import AfterCommit, TaskHost
from processor.formats import with_formats
from processor.job import Context, Job, Role, load_job, new_job
from processor.timed_job import with_timers
from processor.timers import Timers

__all__ = ["TaskJobs"]

log = logging.getLogger("baton.processor.jobs")


class TaskJobs:
    """Job instances by task.

    Args:
        config: the job's configuration (`job.class`, `job.name`, `job.params`).
        processor_id: named in each instance's context.
        shared: an instance to serve every task as it is (tests hand one to the
            runtime): neither `setup` nor `close` is called on it.
        metrics: where the job's own metrics go (the processor's registry).
    """

    def __init__(self, config: Config, processor_id: str, shared: Job | None = None,
                 metrics: JobMetricSet | None = None) -> None:
        self._config = config
        self._processor = processor_id
        formats = config.job.key_format, config.job.value_format
        self._formats = formats
        self._partitioner = config.job.partitioner
        # wall-clock timers only where every copy of the state is the owner's writes
        self._wall = config.catch_up.source == "changelog"
        self._shared = None if shared is None else with_timers(
            with_formats(shared, *formats), Timers(self._wall), self._partitioner)
        self._class = type(shared) if shared is not None else load_job(config.job.class_,
                                                                       config.job_path)
        self._metrics = JobMetricSet.unserved() if metrics is None else metrics
        self._jobs: dict[str, Job] = {}
        self._hosts: dict[str, TaskHost] = {}

    def get(self, task: str, role: Role, partitions: Sequence[str],
            effects: AfterCommit | None = None) -> Job:
        """The task's instance, made now (and set up) if the task just arrived; from
        now on serving `role`: "active" with the active task's `effects`, any other
        role replaying."""
        host = self._hosts.get(task)
        if host is None:
            host = self._hosts[task] = TaskHost(self._metrics.task(task))
        host.effects = effects if role == "active" else None
        if self._shared is not None:
            return self._shared
        job = self._jobs.get(task)
        if job is None:
            context = Context(self._config.job.name, task, tuple(partitions),
                              self._processor, role, self._config.job.params, host,
                              Timers(self._wall))
            job = self._jobs[task] = with_timers(
                with_formats(new_job(self._class, context), *self._formats),
                context.timers, self._partitioner)
        return job

    def close(self, task: str) -> None:
        """The task left: close its instance (if it has one)."""
        self._hosts.pop(task, None)
        job = self._jobs.pop(task, None)
        if job is None:
            return
        try:
            job.close()
        except Exception:  # noqa: BLE001 - user code; the task has left either way
            log.exception("task %r: the job's close() raised", task)

    def close_all(self) -> None:
        for task in list(self._jobs):
            self.close(task)
