"""A job where only names travel: the Spark executors make theirs from a `JobSpec`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from processor.formats import Format, with_formats
from processor.job import Context, Job, Role, load_job, new_job
from processor.timed_job import with_timers

if TYPE_CHECKING:
    from orchestrator.wire.config import Config

__all__ = ["JobSpec", "job_spec"]


@dataclass(frozen=True)
class JobSpec:
    """How to make a job where only names travel (Spark executors): its class path,
    the job's name, the `[job.params]` table, the task, `[job] path` (resolved; on an
    executor its directories are found in the zip shipped with the job, see
    processor/spark/code.py) and the formats, picklable. A bare class path is a spec
    without params."""

    class_path: str
    job: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    task: str = ""
    path: tuple[str, ...] = ()
    key_format: Format = "bytes"
    value_format: Format = "bytes"
    partitioner: str = "consistent_random"     # where a barrier sends each timer's key

    @classmethod
    def of(cls, job: str | JobSpec) -> JobSpec:
        return job if isinstance(job, JobSpec) else cls(job)

    def make(self, partitions: Sequence[str], role: Role = "bulk") -> Job:
        """A set-up instance for one fold of the task (its caller closes it).

        Raises:
            JobLoadError: the class cannot be loaded.
        """
        context = Context(self.job, self.task, tuple(partitions), "spark", role,
                          dict(self.params))
        # not `path`: an executor imports from the zip shipped to it (a directory of
        # the same name on its host would be stale, or another's)
        job = new_job(load_job(self.class_path), context)
        return with_timers(with_formats(job, self.key_format, self.value_format),
                           context.timers, self.partitioner)


def job_spec(config: Config) -> JobSpec:
    """The `JobSpec` of a configured job (its class, name, params, path and formats)."""
    job = config.job
    return JobSpec(job.class_, job.name, dict(job.params),
                   path=tuple(str(p) for p in config.job_path),
                   key_format=job.key_format, value_format=job.value_format,
                   partitioner=job.partitioner)
