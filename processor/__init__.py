"""Processor daemon: the Job API, the task runtime, exactly-once output."""

from __future__ import annotations

from processor.job import Context, Emitted, Job, Output, Record, State, new_job

__all__ = ["Context", "Emitted", "Job", "Output", "Record", "State", "new_job"]
