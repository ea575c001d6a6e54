"""The operator CLI and the coordinator daemon as a real subprocess on the broker:
start-up, status, plan, drain, expand, config and token errors, SIGTERM, fencing."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.devkit.embedded import free_port
from orchestrator.wire.token import read_token
from tests.daemon_support import wait_for_coordinator
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]


def baton(*args: Any, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_coordinator_starts_serves_status_and_stops_on_sigterm(coordinated, daemons) -> None:
    config, path = coordinated(partitions=4)
    coordinator = daemons("coordinator", "coordinator", "-c", path)
    client = wait_for_coordinator(config, coordinator)
    token_mode = stat.S_IMODE(os.stat(config.token_file).st_mode)
    assert token_mode == 0o600
    status = client.status()
    assert status["generation"] == 1
    assert [t["name"] for t in status["tasks"]] == [f"Partition {i}" for i in range(4)]
    human = baton("status", "-c", path)
    assert human.returncode == 0, human.stderr
    assert "Partition 3" in human.stdout and "/metrics" in human.stdout
    as_json = json.loads(baton("status", "-c", path, "--json").stdout)
    assert as_json["generation"] == 1
    token = config.token_file.read_text().strip()
    assert token not in coordinator.log()
    assert coordinator.stop() == 0
    assert "stopped cleanly" in coordinator.log()


def test_restart_keeps_the_model(coordinated, daemons) -> None:
    config, path = coordinated(partitions=2)
    first = daemons("coordinator-1", "coordinator", "-c", path)
    wait_for_coordinator(config, first)
    assert first.stop() == 0
    second = daemons("coordinator-2", "coordinator", "-c", path)
    client = wait_for_coordinator(config, second)
    assert client.status()["generation"] == 1
    assert "resumed job" in second.log()


def test_second_coordinator_is_a_standby_until_the_leader_dies(coordinated, daemons) -> None:
    config, path = coordinated(partitions=2)
    first = daemons("coordinator-1", "coordinator", "-c", path)
    leader = wait_for_coordinator(config, first)
    port = free_port()
    second = daemons("coordinator-2", "coordinator", "-c", path, "--listen", f"127.0.0.1:{port}")
    standby = f"http://127.0.0.1:{port}"
    wait_for(lambda: "standby: job" in second.log(), 30, "the second one standing by")
    # a standby checks the token as the leader does, then says where the leader is
    assert httpx.get(f"{standby}/status", timeout=10).status_code == 401
    refused = httpx.get(f"{standby}/status", timeout=10, headers={
        "Authorization": f"Bearer {read_token(config.token_file)}"})
    assert refused.status_code == 503 and refused.json()["standby"] is True
    assert refused.json()["leader"] == config.coordinator.url
    assert 'baton_coordinator_leader{job="' in httpx.get(f"{standby}/metrics").text
    assert _gauge(httpx.get(f"{standby}/metrics").text, "baton_coordinator_leader") == 0
    assert _gauge(httpx.get(f"{leader.url}/metrics").text, "baton_coordinator_leader") == 1
    probe = httpx.get(f"{standby}/containerHeartbeat",
                      params={"executionContainerId": "nobody"}, timeout=10)
    assert probe.status_code == 200 and probe.json() == {"alive": False}   # the leader's
    first.kill()
    killed = time.monotonic()
    wait_for(lambda: httpx.get(f"{standby}/status", headers={
        "Authorization": f"Bearer {read_token(config.token_file)}"}, timeout=10
    ).status_code == 200, 30, "the standby leading")
    assert time.monotonic() - killed < config.coordinator.takeover_ms / 1000 + 8
    assert "taking over" in second.log()
    assert _gauge(httpx.get(f"{standby}/metrics").text, "baton_coordinator_leader") == 1


def _gauge(text: str, name: str) -> float:
    line = next(x for x in text.splitlines() if x.startswith(name + "{"))
    return float(line.rsplit(" ", 1)[1])


def test_same_address_second_coordinator_fails_without_fencing(coordinated, daemons) -> None:
    config, path = coordinated(partitions=2, coordinator={"bind_timeout_ms": 1500})
    first = daemons("coordinator-1", "coordinator", "-c", path)
    wait_for_coordinator(config, first)
    second = daemons("coordinator-2", "coordinator", "-c", path)
    assert second.wait(60) == 1         # restartable: the port may free by the next start
    log = second.log()
    assert "(coordinator.listen) is in use; trying again for up to 2 s" in log
    assert "cannot listen on" in log and "tried for coordinator.bind_timeout_ms" in log
    assert first.running()


def test_config_error_names_file_and_key(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[job]\nname = "x"\nclass = "a:B"\ninputs = []\noutput = "o"\n'
                   '[kafka]\nbootstrap_servers = "127.0.0.1:1"\n')
    result = baton("coordinator", "-c", bad)
    assert result.returncode == 2
    assert str(bad) in result.stderr and "job.inputs" in result.stderr


def test_open_token_file_is_refused(coordinated, daemons) -> None:
    config, path = coordinated(partitions=1)
    config.token_file.parent.mkdir(parents=True, exist_ok=True)
    config.token_file.write_text("secret\n")
    config.token_file.chmod(0o644)
    coordinator = daemons("coordinator", "coordinator", "-c", path)
    assert coordinator.wait(60) == 2
    assert str(config.token_file) in coordinator.log()
    assert "secret" not in coordinator.log()


def test_unreachable_coordinator_is_named(coordinated) -> None:
    config, path = coordinated(partitions=1)
    config.token_file.parent.mkdir(parents=True, exist_ok=True)
    config.token_file.write_text("t\n")
    config.token_file.chmod(0o600)
    started = time.monotonic()
    result = baton("status", "-c", path, "--timeout", "3")
    assert result.returncode == 1
    assert 3 <= time.monotonic() - started < 30          # kept trying for --timeout
    error = result.stderr.splitlines()[-1]
    assert error.startswith(f"baton status: coordinator at {config.coordinator.url} is "
                            "unreachable")
    assert "kept trying for 3 s" in error
    assert "no coordinator leads yet" in result.stderr   # said so while it tried


def test_plan_drain_refusals_and_expand(coordinated, daemons, broker) -> None:
    config, path = coordinated(partitions=2)
    coordinator = daemons("coordinator", "coordinator", "-c", path)
    client = wait_for_coordinator(config, coordinator)
    plan = json.loads(baton("plan", "-c", path, "--add", "p1", "--json").stdout)
    assert {m["to"] for m in plan["moves"]} == {"p1"}
    # one list syntax: a comma list and a repeated option plan the same
    listed = json.loads(baton("plan", "-c", path, "--add", "p1,p2", "--json").stdout)
    repeated = json.loads(baton("plan", "-c", path, "--add", "p1", "--add", "p2",
                                "--json").stdout)
    assert {m["to"] for m in listed["moves"]} == {"p1", "p2"}
    assert listed["moves"] == repeated["moves"]
    human = baton("plan", "-c", path, "--add", "p1")
    assert human.returncode == 0 and "Partition 1" in human.stdout
    unknown = baton("drain", "-c", path, "--processor", "ghost")
    assert unknown.returncode == 2 and "ghost" in unknown.stderr
    odd = baton("expand", "-c", path, "--topic", config.job.inputs[0], "--partitions", "3")
    assert odd.returncode == 2 and "from 2 to 3" in odd.stderr
    # no processor: the expansion applies but cannot go live; a short timeout names why
    # (the timeout bounds the request too, which grows the topic: on a loaded machine
    # the coordinator can take more than 1 s to answer it)
    grown = baton("expand", "-c", path, "--topic", config.job.inputs[0], "--partitions", "4",
                  "--timeout", "5")
    assert grown.returncode == 1 and "no live processor" in grown.stderr
    assert grown.stderr.startswith("baton expand: timed out")
    assert (f"the expansion itself was applied: {config.job.inputs[0]} has 4 partitions"
            in grown.stderr)
    status = client.status()
    # 2: the expansion; 3 once its barriers are settled (expansion_grace_ms 0: at once)
    assert status["generation"] in (2, 3)
    assert status["tasks"][0]["partitions"] == [f"{config.job.inputs[0]}:0",
                                                f"{config.job.inputs[0]}:2"]
    waited = baton("wait", "-c", path, "--until", "balanced", "--timeout", "1")
    assert waited.returncode == 1 and "pending" in waited.stderr
    # --no-wait: applied and recorded, no wait for a generation that cannot go live
    started = time.monotonic()
    again = baton("expand", "-c", path, "--topic", config.job.inputs[0], "--partitions", "8",
                  "--no-wait", "--timeout", "60")
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - started < 30
    assert "has 8 partitions" in again.stdout and "not waiting" in again.stdout
    assert len(client.status()["tasks"][0]["partitions"]) == 4


def test_monitor_applies_growth_and_reports_refusals(coordinated, daemons, broker) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    config, path = coordinated(partitions=2)
    coordinator = daemons("coordinator", "coordinator", "-c", path)
    client = wait_for_coordinator(config, coordinator)
    admin = AdminClient(broker.settings())
    topic = config.job.inputs[0]
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    # the expansion (generation 2), then its barriers settled (3: expansion_grace_ms 0)
    wait_for(lambda: client.status()["generation"] == 3, 30, "the monitor's expansion")
    assert all(b["settled"] for b in client.status()["barriers"].values())
    admin.create_partitions([NewPartitions(topic, 6)])[topic].result(30)
    wait_for(lambda: client.status()["errors"], 30, "the refused expansion in /status")
    error = client.status()["errors"][0]
    assert topic in error and "from 4 to 6" in error
    assert client.status()["generation"] == 3


def test_wait_started_before_the_coordinator_waits_for_it(coordinated, daemons) -> None:
    """As an operator's script does it: `baton wait` right after starting the daemons,
    before the coordinator has created its token file. Without a coordinator at all, the
    timeout names the token file."""
    config, path = coordinated(partitions=2)
    alone = baton("wait", "-c", path, "--until", "balanced", "--timeout", "1")
    assert alone.returncode == 1
    assert str(config.token_file) in alone.stderr and "timed out" in alone.stderr
    waiting = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "wait", "-c",
                                str(path), "--until", "balanced", "--timeout", "90"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=ROOT)
    try:
        daemons("coordinator", "coordinator", "-c", path)
        daemons("p1", "processor", "-c", path, "--id", "p1")
        out, err = waiting.communicate(timeout=120)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    assert "balanced at generation" in out
