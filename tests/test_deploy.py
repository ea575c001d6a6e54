"""The systemd units in deploy/systemd: the keys docs/operations.md promises (always), and
`systemd-analyze verify` on them (additionally, where the command exists)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parent.parent / "deploy" / "systemd"
COORDINATOR = UNITS / "baton-coordinator.service"
PROCESSOR = UNITS / "baton-processor@.service"
AUTOSCALER = UNITS / "baton-autoscale.service"


def _parse(path: Path) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None,
                                     comment_prefixes=("#", ";"), empty_lines_in_values=False)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(path.read_text())
    return unit


@pytest.mark.parametrize("path", [COORDINATOR, PROCESSOR, AUTOSCALER], ids=lambda p: p.name)
def test_restart_and_stop_policy(path: Path) -> None:
    service = _parse(path)["Service"]
    assert service["Restart"] == "on-failure"
    # 2 is a bad config: restarting cannot help; 3 (declared dead, fenced) must restart
    assert service["RestartPreventExitStatus"].split() == ["2"]
    assert "3" in service["RestartForceExitStatus"].split()
    assert service["KillSignal"] == "SIGTERM"
    assert service["KillMode"] == "mixed"
    assert int(service["TimeoutStopSec"]) >= 30
    assert _parse(path)["Install"]["WantedBy"] == "multi-user.target"


def test_the_commands_are_the_cli() -> None:
    coordinator = _parse(COORDINATOR)["Service"]["ExecStart"].split()
    assert coordinator[0].endswith("/baton") and coordinator[1:3] == ["coordinator", "-c"]
    processor = _parse(PROCESSOR)["Service"]["ExecStart"].split()
    assert processor[0].endswith("/baton") and processor[1:3] == ["processor", "-c"]
    assert processor[-2:] == ["--id", "%i"]         # the instance name is the processor id
    autoscaler = _parse(AUTOSCALER)["Service"]["ExecStart"].split()
    assert autoscaler[0].endswith("/baton") and autoscaler[1:3] == ["autoscale", "-c"]


def test_the_processor_may_open_every_file_of_512_stores() -> None:
    """LimitNOFILE as docs/operations.md ("Capacity planning") derives it: per store,
    its table files at the [store] default plus 8 of its own; 1024 for the rest."""
    from orchestrator.wire.store_config import StoreConfig

    limit = int(_parse(PROCESSOR)["Service"]["LimitNOFILE"])
    assert limit == (StoreConfig().max_open_files + 8) * 512 + 1024


def test_the_operations_guide_shows_the_shipped_units() -> None:
    guide = (UNITS.parent.parent / "docs" / "operations.md").read_text()
    assert "## Running as services" in guide
    for path in (COORDINATOR, PROCESSOR, AUTOSCALER):
        assert path.read_text().strip() in guide, f"the guide's copy of {path.name} differs"


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """Always parses; runs `systemd-analyze verify` too where it is installed (the
    ExecStart binary is pointed at an existing executable: verify checks it exists)."""
    for path in (COORDINATOR, PROCESSOR, AUTOSCALER):
        assert {"Unit", "Service", "Install"} <= set(_parse(path).sections())
        (tmp_path / path.name).write_text(
            path.read_text().replace("/opt/baton/venv/bin/baton", sys.executable))
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return
    done = subprocess.run(
        [analyze, "verify", str(tmp_path / COORDINATOR.name),
         str(tmp_path / "baton-processor@p1.service")],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "baton" not in done.stderr, done.stderr       # no warning about our units
