"""The Job API's public surface: what a job author imports from `processor`."""

from __future__ import annotations

import processor


def test_the_job_api_exports() -> None:
    assert sorted(processor.__all__) == [
        "Context", "Emitted", "Job", "Output", "Record", "State", "Timer", "new_job"]
    for name in processor.__all__:
        assert getattr(processor, name) is not None
