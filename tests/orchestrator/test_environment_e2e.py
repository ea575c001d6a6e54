"""Daemons configured as a container platform configures them: one file for all, and
each daemon's addresses, paths and id from `BATON_<SECTION>__<KEY>` variables and
`BATON_PROCESSOR_ID`, which win over the file; `baton check` shows where each came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devkit.embedded import free_port
from orchestrator.wire.config import parse_config
from tests.daemon_support import wait_for_coordinator
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_addresses_paths_and_id_from_the_environment(coordinated: Any, daemons: Any,
                                                     tmp_path: Path) -> None:
    config, path = coordinated(partitions=2)
    port = free_port()          # the file's own listen/url point elsewhere: never used
    env = {"BATON_COORDINATOR__LISTEN": f"127.0.0.1:{port}",
           "BATON_COORDINATOR__URL": f'["http://127.0.0.1:{port}"]',
           "BATON_PROCESSOR__STATE_DIR": str(tmp_path / "pod-state"),
           "BATON_PROCESSOR__HEARTBEAT_INTERVAL_MS": "300"}
    seen = parse_config(tomllib.loads(path.read_text()), path, env)
    assert seen.coordinator.urls == [f"http://127.0.0.1:{port}"] != config.coordinator.urls

    coordinator = daemons("coordinator", "coordinator", "-c", path, env=env)
    client = wait_for_coordinator(seen, coordinator)
    daemons("p0", "processor", "-c", path, env={**env, "BATON_PROCESSOR_ID": "pod-0"})

    def balanced() -> bool:
        status = client.status()
        ids = {p["id"]: p for p in status["processors"]}
        return "pod-0" in ids and len(ids["pod-0"]["active"]) == 2 and not status["handoffs"]
    wait_for(balanced, 90, "pod-0 holding both tasks")
    stores = tmp_path / "pod-state" / config.job.name / "pod-0"
    assert stores.is_dir() and any(stores.iterdir())
    assert not (Path(config.processor.state_dir) / config.job.name / "pod-0").exists()

    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "check", "-c", str(path),
                           "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, **env, "BATON_KAFKA__SASL_USERNAME": "svc"})
    report = json.loads(done.stdout)
    notes = {f["subject"]: f["message"] for f in report["findings"] if f["status"] == "note"}
    assert notes["processor.state_dir"] == (f'= "{tmp_path / "pod-state"}" (from '
                                            "BATON_PROCESSOR__STATE_DIR, over the file)")
    assert "BATON_COORDINATOR__LISTEN" in notes["coordinator.listen"]
    assert notes["kafka.sasl.username"] == ("= [redacted] (from BATON_KAFKA__SASL_USERNAME, "
                                            "over the file)")
    assert "svc" not in done.stdout


def test_a_bad_variable_stops_a_daemon_before_it_starts_naming_it(coordinated: Any,
                                                                  daemons: Any) -> None:
    _, path = coordinated(partitions=1)
    daemon = daemons("p1", "processor", "-c", path, "--id", "p1",
                     env={"BATON_PROCESSOR__COMMIT_INTERVAL_MS": "-5"})
    assert daemon.wait(60) == 2
    assert ("processor.commit_interval_ms (from BATON_PROCESSOR__COMMIT_INTERVAL_MS): "
            "Input should be greater than 0") in daemon.log()

