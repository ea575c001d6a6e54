"""Processor daemon: the Job API, the task runtime, exactly-once output."""

from __future__ import annotations

from processor.job import Job, Output, Record, State

__all__ = ["Job", "Output", "Record", "State"]
