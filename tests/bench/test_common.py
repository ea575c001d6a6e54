"""What the benches share (bench/_common.py), where it is more than a helper: a bench
ended by SIGTERM stops what it started."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# a bench's shape: what it started is stopped in a `finally` block
BENCH = """
import sys, time
sys.path.insert(0, {bench!r})
import _common
_common.stop_on_sigterm()
try:
    print("started", flush=True)
    time.sleep(60)
finally:
    open({marker!r}, "w").write("stopped")
"""


def test_sigterm_ends_a_bench_through_its_finally_blocks(tmp_path: Path) -> None:
    marker = tmp_path / "cleaned-up"
    code = BENCH.format(bench=str(ROOT / "bench"), marker=str(marker))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert marker.read_text() == "stopped", err
    assert "KeyboardInterrupt: signal 15" in err
