"""`baton check` against the real broker and a real coordinator: each misconfiguration
is reported on its own line naming its key, topic or URL, with the exit code it asks for."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devkit.embedded import free_port
from orchestrator.wire.config import ConfigError, dump_config, parse_config
from tests.daemon_support import wait_for_coordinator
from tests.faults_support import with_standby_url
from tests.orchestrator.test_e2e import Job
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]


def check(path: Path) -> tuple[int, dict[str, Any], str]:
    """Run `baton check` twice (JSON and human); both must agree on the exit code."""
    command = [sys.executable, "-m", "orchestrator.cli", "check", "-c", str(path)]
    as_json = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120,
                             cwd=ROOT)
    human = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert as_json.returncode == human.returncode, (as_json.stdout, human.stdout)
    return as_json.returncode, json.loads(as_json.stdout), human.stdout


def write(tmp_path: Path, raw: dict[str, Any], text: str = "") -> Path:
    path = tmp_path / "job.toml"
    path.write_text(dump_config(raw) + text)
    return path


def problems(report: dict[str, Any], status: str) -> list[str]:
    return [f"{f['subject']}: {f['message']}" for f in report["findings"]
            if f["status"] == status]


def test_every_config_error_is_reported_at_once(tmp_path: Path) -> None:
    raw = {"job": {"name": "sums", "class": "processor.examples:RunningSum",
                   "inputs": ["events"], "output": "sums"},
           "kafka": {"bootstrap_servers": "127.0.0.1:9"},
           "processor": {"on_error": "retry", "comit_interval_ms": 50},
           "catch_up": {"acceptable_lag": -1}}
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, tmp_path / "job.toml")
    assert len(caught.value.problems) == 3
    path = write(tmp_path, raw)
    code, report, human = check(path)
    assert code == 2
    errors = problems(report, "error")
    assert len(errors) == 3
    for key in ("processor.on_error", "processor.comit_interval_ms", "catch_up.acceptable_lag"):
        line = next(line for line in human.splitlines() if key in line)
        assert str(path) in line and line.startswith("ERROR")
    assert any("unknown key" in e for e in errors if "comit_interval_ms" in e)


def test_all_good_with_a_running_coordinator(coordinated: Any, daemons: Any) -> None:
    config, path = coordinated(partitions=3)
    code, report, _ = check(path)
    assert code == 1     # no coordinator yet: named by its URL
    down = problems(report, "unreachable")
    assert down == [next(p for p in down if config.coordinator.urls[0] in p)]
    assert "coordinator.url" in down[0]
    wait_for_coordinator(config, daemons("coordinator", "coordinator", "-c", path))
    code, report, human = check(path)
    assert code == 0, human
    subjects = {f["subject"]: f["message"] for f in report["findings"]}
    assert "3 partitions" in subjects[f"job.inputs {config.job.inputs[0]}"]
    assert "3 partitions" in subjects[f"job.output {config.job.output}"]
    token = f"coordinator.token_file {config.token_file} at {config.coordinator.urls[0]}"
    assert subjects[token] == "the leader accepts it"
    assert f"baton.{config.job.name}.coordinator" in " ".join(subjects)
    assert "consumer group readable" in subjects[f"job.name baton.{config.job.name}"]


def test_missing_topics_and_job_class_are_config_errors(coordinated: Any) -> None:
    config, path = coordinated(partitions=2)
    raw_text = path.read_text().replace(config.job.output, "no-such-output").replace(
        '"processor.examples:RunningSum"', '"nowhere.jobs:Missing"')
    path.write_text(raw_text)
    code, report, _ = check(path)
    assert code == 2
    errors = problems(report, "error")
    assert any(e.startswith("job.output no-such-output") and "does not exist" in e
               for e in errors)
    assert any(e.startswith("job.class") and "nowhere.jobs" in e for e in errors)
    assert not any(config.job.inputs[0] in e for e in errors)


def test_unreachable_broker_is_named(tmp_path: Path) -> None:
    port = free_port()
    raw = {"job": {"name": "sums", "class": "processor.examples:RunningSum",
                   "inputs": ["events"], "output": "sums"},
           "kafka": {"bootstrap_servers": f"127.0.0.1:{port}"},
           "coordinator": {"url": f"http://127.0.0.1:{free_port()}"}}
    code, report, _ = check(write(tmp_path, raw))
    assert code == 1
    down = problems(report, "unreachable")
    assert any(d.startswith("kafka.bootstrap_servers") and f"127.0.0.1:{port}" in d
               for d in down)
    assert any(d.startswith("coordinator.url") for d in down)
    assert not problems(report, "error")


def test_dead_letter_and_changelog_topics_when_the_config_needs_them(
        coordinated: Any, broker: Any) -> None:
    config, path = coordinated(partitions=2, processor={"on_error": "dlq"},
                               catch_up={"source": "changelog"})
    _, report, _ = check(path)
    found = {f["subject"]: f for f in report["findings"]}
    dlq = found[f"processor.on_error baton.{config.job.name}.dlq"]
    changelog = found[f"catch_up.source baton.{config.job.name}.changelog"]
    assert dlq["status"] == changelog["status"] == "note"
    broker.create_topic(f"baton.{config.job.name}.dlq", 1)
    _, report, _ = check(path)
    found = {f["subject"]: f for f in report["findings"]}
    assert found[f"processor.on_error baton.{config.job.name}.dlq"]["status"] == "ok"
    _, plain_path = coordinated(partitions=2)
    _, report, _ = check(plain_path)
    assert not any(".dlq" in f["subject"] or ".changelog" in f["subject"]
                   for f in report["findings"])


def test_a_wrong_token_is_a_permission_error(coordinated: Any, daemons: Any) -> None:
    config, path = coordinated(partitions=1)
    wait_for_coordinator(config, daemons("coordinator", "coordinator", "-c", path))
    config.token_file.write_text("not-the-token\n")
    code, report, _ = check(path)
    assert code == 2
    assert any(e.startswith("coordinator.token_file") and "401" in e
               for e in problems(report, "error"))


def test_coordinators_holding_different_tokens_are_named(coordinated: Any, daemons: Any,
                                                         tmp_path: Path) -> None:
    """A standby that made a token of its own would lock everyone out after a failover:
    the check names it, and which coordinator accepts the operators' token."""
    config, path = coordinated(partitions=1)
    j = Job(config, path, daemons)
    listen = with_standby_url(j)
    j.start_coordinator()
    own = tmp_path / "standby.token"          # its host has no copy: it makes its own
    raw = tomllib.loads(j.path.read_text())
    raw["coordinator"]["token_file"] = str(own)
    standby_config = tmp_path / "standby.toml"
    standby_config.write_text(dump_config(raw))
    standby = j.daemons("coordinator-standby", "coordinator", "-c", standby_config,
                        "--listen", listen)
    wait_for(lambda: "standby: job" in standby.log() or not standby.running(), 30,
             "the second coordinator standing by")
    assert own.read_text() != j.config.token_file.read_text()
    leader, other = j.config.coordinator.urls
    code, report, human = check(j.path)
    assert code == 2, human
    errors = problems(report, "error")
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"coordinator.token_file {j.config.token_file} at {other}: ")
    assert f"refuses the token (HTTP 401) that {leader} accepts" in errors[0]
    assert "copy" in errors[0]
    # the same token on both: all good
    own.write_text(j.config.token_file.read_text())
    standby.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "SIGHUP" in standby.log() or "token was replaced" in standby.log(), 30,
             "the standby re-reading its token")
    code, _, human = check(j.path)
    assert code == 0, human
