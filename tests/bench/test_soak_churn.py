"""bench/soak_churn.py: what a failed wait adds for its reader."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from soak_churn import Churn  # noqa: E402 - a bench module


def test_a_failed_wait_quotes_the_pending_processors_lines_on_its_task(tmp_path: Path) -> None:
    (tmp_path / "p1.log").write_text(
        "t INFO task 'Partition 5': replaying 10 records before going active\n"
        "t INFO task 'Partition 50': active from {}\n"
        "t WARNING the activation consumer has reached no broker\n"
        "t INFO task 'Partition 1': active from {}\n")
    churn = Churn.__new__(Churn)        # only its workdir is read
    churn.workdir = tmp_path
    said = ("baton wait: timed out after 300 s waiting for balanced; pending: "
            "task 'Partition 5': p1 has not reported it active yet")
    lines = churn._pending_lines(said).splitlines()
    assert lines == ["", "-- p1's last lines on task 'Partition 5':",
                     "t INFO task 'Partition 5': replaying 10 records before going active",
                     "-- p1's last warnings and errors:",
                     "t WARNING the activation consumer has reached no broker"]
    assert churn._pending_lines("baton wait: timed out; pending: the assignor has more "
                                "moves to make") == ""
