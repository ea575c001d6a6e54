"""The pinned Job API: what a user subclasses, and the record it receives.

`process()` is called once per input record with the task's state mapping (backed by
the task store's transaction overlay) and yields `(key, value)` pairs for the output
topic. For the `input` catch-up source it must be deterministic: warmups replay the
same records through it to rebuild the same state.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Job", "JobLoadError", "Record", "Output", "State", "load_job"]

Output = tuple[bytes | str | None, bytes | str | None]
State = MutableMapping[Any, Any]


@dataclass(frozen=True, slots=True)
class Record:
    """One input record, as the job sees it."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    timestamp: int


class Job:
    """Base class of a stateful job; override `process`."""

    def process(self, record: Record, state: State) -> Iterable[Output]:
        """Update `state` from `record` and yield output `(key, value)` pairs."""
        raise NotImplementedError(f"{type(self).__name__} must implement process()")


class JobLoadError(ValueError):
    """`job.class` names nothing importable, or not a `Job` subclass (callers name the key)."""


def load_job(class_path: str) -> type[Job]:
    """Import ``"module:Class"``, a `Job` subclass (the daemon, Spark executors, audit).

    Raises:
        JobLoadError: not importable, or not a Job subclass.
    """
    module_name, _, name = class_path.partition(":")
    try:
        job_class = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise JobLoadError(f"cannot import job class {class_path!r}: {exc}") from None
    if not (isinstance(job_class, type) and issubclass(job_class, Job)):
        raise JobLoadError(f"{class_path!r} is not a processor.Job subclass")
    return job_class
