"""The coordinator under load, as `bench/coordinator_load.py` measures it, test-sized:
simulated processors over the real HTTP API of a real coordinator daemon. Every
heartbeat is answered, and once the job is balanced no reply carries the job model
(the processors hold the current generation)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from coordinator_load import measure  # noqa: E402 - the benchmark itself, test-sized

pytestmark = pytest.mark.integration


def test_200_processors_every_heartbeat_answered_no_model_resent(broker: Any) -> None:
    row = measure(broker.bootstrap, processors=200, per_processor=5, seconds=10.0,
                  settle_s=60.0)
    assert row["settled"], row
    assert row["sent"] >= 200 * 9, f"the simulated fleet did not heartbeat: {row}"
    # the whole row, error kinds included (pytest would shorten a dict's repr)
    assert row["answered"] == row["sent"] and row["errors"] == 0, f"{row}"
    assert row["model_replies"] == 0, f"the model was sent to current processors: {row}"
