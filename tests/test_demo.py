"""`baton demo --json`: the whole scenario end to end, with the pinned summary keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.smoke]
ROOT = Path(__file__).resolve().parents[1]
PINNED = ("records_in", "records_out", "lost", "duplicated", "handoffs", "pause_ms_p50",
          "pause_ms_p99", "catchup_records_per_s")


def test_demo_passes_its_oracle() -> None:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "demo", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(key in summary for key in PINNED), summary
    assert summary["ok"] is True
    assert summary["lost"] == 0 and summary["duplicated"] == 0
    assert summary["records_in"] == summary["records_out"] > 0
    assert summary["handoffs"] > 0
    assert summary["split_children"] == 4        # 4 -> 8 tasks, run on 5 processors
