"""Jobs shipped with Baton: the demo's running sum, and jobs the tests use."""

from __future__ import annotations

from collections.abc import Iterator

from processor.job import Job, Output, Record, State

__all__ = ["RunningSum"]


class RunningSum(Job):
    """Per key, the sum of the integer values seen so far (the demo's main job)."""

    def process(self, record: Record, state: State) -> Iterator[Output]:
        if record.key is None or record.value is None:
            raise ValueError(f"RunningSum needs a key and an integer value, got {record!r}")
        total = state.get(record.key, 0) + int(record.value)
        state[record.key] = total
        yield record.key, str(total)
