"""Several hosts: the broker, two coordinators and two processors each on a host of its
own (a network namespace with its own address, orchestrator/devkit/hosts.py), set up
as an operator would by following docs/operations.md's two-host walk-through step by
step (TLS on, one shared token, non-loopback addresses, Prometheus service discovery
through both coordinators), then network faults between the hosts. Every case ends
with the running-sum oracle over the output topic.

Run alone: `./run test tests/test_hosts.py` (root: it creates namespaces and a bridge).
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.devkit import walkthrough
from orchestrator.devkit.hosts import HostKafkaBroker, Network
from orchestrator.devkit.walkthrough import HOSTS, KAFKA_PORT, METRICS_PORT, STEPS, SUBNET, Step
from orchestrator.wire.config import load_config
from orchestrator.wire.http import httpx
from orchestrator.wire.tls import TlsSettings, client_context
from tests.brokers import BROKER_NICE, Broker
from tests.daemon_support import coordinator_client
from tests.faults_support import FAULT_RESULTS, committed_records
from tests.feeder import Feeder
from tests.hosts_support import HostFiles, Walk, issue_certificates
from tests.oracle_report import oracle_check
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


@dataclass
class Lan:
    """The hosts' network and the broker on its host."""

    net: Network
    broker: Broker


@pytest.fixture(scope="module")
def lan(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lan]:
    assert os.geteuid() == 0, "the several-host tests create network namespaces: run as root"
    with Network(SUBNET) as net:
        for h in HOSTS:
            if h.role != "operator":
                net.add(h.name, h.address)
        assert net.gateway == next(h.address for h in HOSTS if h.role == "operator")
        kafka = HostKafkaBroker(net.hosts["kafka"], tmp_path_factory.mktemp("kafka"),
                                KAFKA_PORT, nice=BROKER_NICE)
        kafka.start()
        try:
            yield Lan(net, Broker(kafka.bootstrap, {}, kafka))
        finally:
            kafka.close()


def _topic(lan: Lan, walk: Walk, step: Step) -> None:
    words = step.command.split()
    topic = words[words.index("--topic") + 1]
    key = "input" if topic == walk.name("input") or topic == walkthrough.JOB["input"] \
        else "output"
    lan.broker.create_topic(walk.name(key), int(words[words.index("--partitions") + 1]))


def _baton(walk: Walk, step: Step) -> subprocess.CompletedProcess[str]:
    done = walk.baton(step)
    assert done.returncode == 0, f"{step.command}: {done.stdout}{done.stderr}"
    return done


def _sd_targets(walk: Walk, url: str) -> set[str] | None:
    """The targets `/sd` at `url` lists (None: no list, e.g. a standby without one)."""
    ca = walk.files.etc("ops") / "ca.pem"
    with httpx.Client(verify=client_context(TlsSettings(ca)), timeout=10) as http:
        answer = http.get(f"{url}/sd")
    if answer.status_code != 200:
        return None
    return {t for group in answer.json() for t in group["targets"]}


def _promtool(walk: Walk) -> None:
    config = walk.files.root("ops") / "prometheus.yml"
    config.write_text(walk.files.local("ops", walkthrough.prometheus_yaml()))
    done = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def _verify(case: str, lan: Lan, walk: Walk, feeder: Feeder) -> None:
    """Balanced again, every record through, and the oracle: the table's row."""
    waited = walk.baton(Step("ops", "baton", "baton wait -c /etc/baton/job.toml --until "
                                            "balanced --timeout 120", ""))
    assert waited.returncode == 0, waited.stdout + waited.stderr
    sent = feeder.stop()
    wait_for(lambda: committed_records(lan.broker, f"baton.{walk.name('name')}",
                                       walk.name("input")) >= sent, 120,
             f"all {sent} records committed")
    config = load_config(walk.config_path("ops"))
    result = oracle_check(lan.broker, config)
    FAULT_RESULTS.append((case, result.records_in, result.records_out, result.lost,
                          result.duplicated, result.wrong))
    assert result.records_in == sent
    assert result.ok, result


def _traffic(lan: Lan, walk: Walk) -> Feeder:
    feeder = Feeder(lan.broker, walk.name("input"), keys=40, rate=300).start()
    wait_for(lambda: feeder.sent > 600, 30, "some traffic")
    return feeder


def test_the_guide_shows_the_walk_through_as_rendered() -> None:
    assert walkthrough.render() in GUIDE.read_text()


def test_two_host_walk_through(lan: Lan, tmp_path: Path, daemons) -> None:
    files = HostFiles(tmp_path / "hosts")
    walk = Walk(lan.net, files, daemons)
    feeder: Feeder | None = None
    for step in STEPS:
        if step.kind == "topic":
            _topic(lan, walk, step)
        elif step.kind == "cert":
            issue_certificates(files)
        elif step.kind == "copy":
            walk.copy(step)
        elif step.kind == "daemon":
            daemon = walk.start(step)
            if step.command.startswith("baton coordinator"):
                said = "leads job" if step.host == "coord-a" else "standby: job"
                wait_for(lambda d=daemon, s=said: s in d.log() or not d.running(), 60,
                         f"{step.host}: {said}")
                assert daemon.running(), daemon.log()
        elif step.kind == "stop":
            feeder = _traffic(lan, walk)
            assert walk.running["coord-a"].stop() == 0
            wait_for(lambda w=walk: "leads job" in w.running["coord-b"].log(), 60,
                     "coord-b leading")
        elif step.command.startswith("baton token"):
            done = _baton(walk, step)
            token = files.etc("coord-a") / "coordinator.token"
            assert str(token) in done.stdout
            assert stat.S_IMODE(token.stat().st_mode) == 0o600
            assert token.read_text().strip() not in done.stdout + done.stderr
        elif step.command.startswith("baton check"):
            done = _baton(walk, step)
            for url in walkthrough.coordinator_urls():
                assert f"coordinator.token_file {files.etc('ops')}/coordinator.token at " \
                       f"{url}: the " in done.stdout, done.stdout
        elif step.command.startswith("baton wait"):
            _baton(walk, step)
            answers = [_sd_targets(walk, u) for u in walkthrough.coordinator_urls()]
            expected = {f"{h.address}:{METRICS_PORT}" for h in HOSTS if h.role == "processor"}
            assert answers[0] == expected, answers
            assert all(a in (None, expected) for a in answers), answers
            _promtool(walk)
        else:
            done = _baton(walk, step)
            assert "p1" in done.stdout and "p2" in done.stdout, done.stdout
    client = coordinator_client(load_config(walk.config_path("ops")))
    assert client.status()["processors"]
    assert feeder is not None
    _verify("walk-through: leader stopped, coord-b leads", lan, walk, feeder)
