"""Several hosts: the broker, two coordinators and two processors each on a host of its
own (a network namespace with its own address, orchestrator/devkit/hosts.py), set up
as an operator would by following docs/operations.md's two-host walk-through step by
step (TLS on, one shared token, non-loopback addresses, Prometheus service discovery
through both coordinators), then network faults between the hosts. Every case ends
with the running-sum oracle over the output topic.

Run alone: `./run test tests/test_hosts.py` (root: it creates namespaces and a bridge).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
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
from tests.faults_support import FAULT_FIGURES, FAULT_RESULTS, committed_records
from tests.feeder import Feeder
from tests.hosts_support import HostFiles, Sidecars, Walk, issue_certificates
from tests.oracle_report import oracle_check
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


@dataclass
class Lan:
    """The hosts' network, the broker on its host, and the file of the one-way delay
    (ms) of every connection to the broker (orchestrator/devkit/delay_proxy.py)."""

    net: Network
    broker: Broker
    delay_file: Path

    def delay(self, ms: int) -> None:
        self.delay_file.write_text(f"{ms}\n")


# a third processor host, for a scale-out (not in the walk-through)
EXTRA_PROCESSOR = ("proc-3", "198.18.52.23")


@pytest.fixture(scope="module")
def lan(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lan]:
    assert os.geteuid() == 0, "the several-host tests create network namespaces: run as root"
    with Network(SUBNET) as net:
        for h in HOSTS:
            if h.role != "operator":
                net.add(h.name, h.address)
        net.add(*EXTRA_PROCESSOR)
        assert net.gateway == next(h.address for h in HOSTS if h.role == "operator")
        folder = tmp_path_factory.mktemp("kafka")
        delay_file = folder / "delay_ms"
        delay_file.write_text("0\n")
        kafka = HostKafkaBroker(net.hosts["kafka"], folder, KAFKA_PORT, nice=BROKER_NICE,
                                delay_file=delay_file)
        kafka.start()
        try:
            yield Lan(net, Broker(kafka.bootstrap, {}, kafka), delay_file)
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
                          result.duplicated, result.wrong, time.monotonic() - feeder.started))
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
            # a standby answers from the stream it follows, a poll behind the leader
            wait_for(lambda e=expected: all(_sd_targets(walk, u) in (None, e)
                                 for u in walkthrough.coordinator_urls()), 30,
                     f"every coordinator's /sd listing {sorted(expected)}")
            _promtool(walk)
        else:
            done = _baton(walk, step)
            assert "p1" in done.stdout and "p2" in done.stdout, done.stdout
    client = coordinator_client(load_config(walk.config_path("ops")))
    assert client.status()["processors"]
    assert feeder is not None
    _verify("walk-through: leader stopped, coord-b leads", lan, walk, feeder)


# --- network faults between the hosts ---------------------------------------------------

# short timeouts, so a case takes seconds: a standby may lead 2 s after the leader's last
# sign of life, a silent processor is declared dead in 4 s (its tasks then move without
# its release), and an unreachable coordinator is logged after 20 s
FAST = {"coordinator": {"takeover_ms": 2000, "processor_timeout_ms": 4000,
                        "release_timeout_ms": 4000},
        "processor": {"heartbeat_interval_ms": 200, "coordinator_grace_ms": 20000}}
GRACE_S = FAST["processor"]["coordinator_grace_ms"] / 1000


def _running(lan: Lan, tmp_path: Path, daemons, unique, append_times: bool = False,
             sidecars: Sidecars | None = None) -> tuple[Walk, Feeder]:
    """The walk-through's set-up (up to `baton wait`), for a job of its own, and traffic.
    `append_times`: the output topic is stamped by the broker (LogAppendTime), so its
    records tell when each output was written (a job's outputs carry the time of their
    input otherwise). `sidecars`: the processors reach the coordinators through them."""
    suffix = unique("h").split("-")[1]
    walk = Walk(lan.net, HostFiles(tmp_path / "hosts"), daemons, FAST,
                {"name": f"sums-{suffix}", "input": f"events-{suffix}",
                 "output": f"sums-{suffix}"})
    if append_times:
        _append_timed(lan, walk.name("output"))
    for step in STEPS:
        if step.kind == "topic":
            if not (append_times and "--topic sums " in step.command):
                _topic(lan, walk, step)
        elif step.kind == "cert":
            issue_certificates(walk.files, loopback=sidecars is not None)
        elif step.kind == "copy":
            walk.copy(step)
        elif step.kind == "daemon":
            if sidecars is not None and step.command.startswith("baton processor"):
                _via_sidecars(walk, sidecars, step.host)
            walk.start(step)
            if step.host == "coord-a":
                wait_for(lambda w=walk: "leads job" in w.running["coord-a"].log(), 60,
                         "coord-a leading")
        elif step.kind == "baton" and not step.command.startswith("baton check"):
            _baton(walk, step)
        if step.command.startswith("baton wait"):
            break
    return walk, _traffic(lan, walk)


def _via_sidecars(walk: Walk, sidecars: Sidecars, host: str) -> None:
    """`host`'s processor reaches the coordinators through its host's delay proxies."""
    config = walk.config_path(host)
    direct = "url = [" + ", ".join(f'"{u}"' for u in walkthrough.coordinator_urls()) + "]"
    local = "url = [" + ", ".join(f'"{u}"' for u in sidecars.urls()) + "]"
    text = config.read_text()
    assert direct in text or local in text
    config.write_text(text.replace(direct, local))
    sidecars.start(walk.net.hosts[host], walk.files.root(host) / "sidecars.log")


def _append_timed(lan: Lan, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": lan.broker.bootstrap})
    spec = NewTopic(topic, walkthrough.PARTITIONS, 1,
                    config={"message.timestamp.type": "LogAppendTime"})
    for future in admin.create_topics([spec]).values():
        future.result(30)
    wait_for(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
             == walkthrough.PARTITIONS, 30, f"{topic} created")


def _holding(walk: Walk) -> dict[str, list[str]]:
    client = coordinator_client(load_config(walk.config_path("ops")))
    try:
        return {p["id"]: p["active"] for p in client.status()["processors"] if p["alive"]}
    finally:
        client.close()


def _answers_as(walk: Walk, url: str) -> int:
    """The HTTP status of /status at `url` alone: 200 leader, 503 standby."""
    config = load_config(walk.config_path("ops"))
    token = config.token_file.read_text().strip()
    ca = walk.files.etc("ops") / "ca.pem"
    try:
        with httpx.Client(verify=client_context(TlsSettings(ca)), timeout=5) as http:
            return http.get(f"{url}/status",
                            headers={"Authorization": f"Bearer {token}"}).status_code
    except httpx.HTTPError:
        return 0


def _leaders(lan: Lan, walk: Walk) -> list[str]:
    """The URLs of the coordinator stream's committed "leader" records, in order, each
    run of one URL shown once: who led, as the stream tells it."""
    seen: list[str] = []
    for m in lan.broker.read_all(f"baton.{walk.name('name')}.coordinator"):
        if m.key() != b"leader" or m.value() is None:
            continue
        url = json.loads(m.value()).get("url")
        if not seen or seen[-1] != url:
            seen.append(url)
    return seen


def test_processor_cut_off_from_the_coordinators(lan, tmp_path, daemons, unique) -> None:
    walk, feeder = _running(lan, tmp_path, daemons, unique)
    net, p1, p2 = lan.net, walk.running["proc-1"], walk.running["proc-2"]
    activated = p2.log().count("first output committed")
    moved = _holding(walk)["p1"]
    cut_at = time.monotonic()
    for name in ("coord-a", "coord-b"):
        net.cut(net.hosts["proc-1"], net.hosts[name])
    try:
        wait_for(lambda: len(_holding(walk).get("p2", [])) == walkthrough.PARTITIONS, 60,
                 "p1's tasks moved to p2")
        FAULT_FIGURES["cut from the coordinators: p1's tasks assigned to p2"] = \
            time.monotonic() - cut_at
        # p2 took them with a fence of p1's producers (init_transactions on each task's
        # transactional id) and has committed output of each
        wait_for(lambda: p2.log().count("first output committed") == activated + 2, 30,
                 "p2's first outputs of p1's tasks")
        FAULT_FIGURES["cut from the coordinators: p1's tasks fenced and live on p2"] = \
            time.monotonic() - cut_at
        # and p1, still cut off, has stopped both: its next commit (or the abort that
        # follows a failed one) met the fence
        def fenced() -> set[str]:
            return {t for t in moved for line in p1.log().splitlines()
                    if f"task {t!r}: " in line and "fenced" in line}
        try:
            wait_for(lambda: fenced() == set(moved), 30, "p1's tasks stopped by the fence")
        except AssertionError:
            said = [line for line in p1.log().splitlines() if "task '" in line]
            raise AssertionError(f"p1's tasks {moved} not all fenced: {said[-20:]}") from None
        FAULT_FIGURES["cut from the coordinators: p1's tasks stopped (fenced)"] = \
            time.monotonic() - cut_at
        assert time.monotonic() - cut_at < GRACE_S
        assert p1.running() and "p1" not in _holding(walk)
    finally:
        net.heal()
    # back on the network, p1 learns that its execution was declared dead, and exits
    wait_for(lambda: not p1.running(), 60, "p1 exiting once it hears the coordinator")
    assert p1.proc.returncode == 3, p1.log()[-2000:]
    del walk.running["proc-1"]
    _verify("processor cut off from the coordinators", lan, walk, feeder)


def test_processor_cut_off_from_kafka(lan, tmp_path, daemons, unique) -> None:
    walk, feeder = _running(lan, tmp_path, daemons, unique)
    net = lan.net
    net.cut(net.hosts["proc-1"], net.hosts["kafka"])
    try:
        sent = feeder.sent
        wait_for(lambda: feeder.sent > sent + 3000, 60, "10 s of traffic while cut")
        # its heartbeats still arrive: it is not declared dead, its tasks stay
        assert len(_holding(walk).get("p1", [])) == 2
    finally:
        net.heal()
    _verify("processor cut off from Kafka", lan, walk, feeder)


def test_one_way_partition_kafka_to_processor(lan, tmp_path, daemons, unique) -> None:
    walk, feeder = _running(lan, tmp_path, daemons, unique)
    net = lan.net
    net.one_way(net.hosts["proc-1"], net.hosts["kafka"])   # its requests arrive, no answer
    try:
        sent = feeder.sent
        wait_for(lambda: feeder.sent > sent + 3000, 60, "10 s of traffic while cut")
        assert len(_holding(walk).get("p1", [])) == 2
    finally:
        net.heal()
    _verify("one-way: Kafka's answers to a processor lost", lan, walk, feeder)


def test_leading_coordinator_cut_off_from_everything(lan, tmp_path, daemons, unique) -> None:
    walk, feeder = _running(lan, tmp_path, daemons, unique)
    net = lan.net
    a, b = walkthrough.coordinator_urls()
    cut_at = time.monotonic()
    net.isolate(net.hosts["coord-a"])
    try:
        wait_for(lambda: "leads job" in walk.running["coord-b"].log(), 60, "coord-b leading")
        FAULT_FIGURES["leader isolated: the standby leads"] = time.monotonic() - cut_at
        wait_for(lambda: len(_holding(walk)) == 2, 60, "both processors with coord-b")
    finally:
        net.heal()
    # back on the network, coord-a finds itself deposed and stands by
    wait_for(lambda: _answers_as(walk, a) == 503, 60, "coord-a standing by")
    assert walk.running["coord-a"].running()
    assert _answers_as(walk, b) == 200
    _verify("leading coordinator cut off from everything", lan, walk, feeder)
    assert _leaders(lan, walk) == [a, b]


# the latency added between every host and the broker, and between the processors and
# the coordinators: each direction of every connection, so each round trip takes twice
# it more
DELAY_MS = 25


def _round_trip_s(lan: Lan) -> float:
    """The median of a few metadata requests from the operator's host to the broker."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": lan.broker.bootstrap})
    admin.list_topics(timeout=10)          # connected
    took = []
    for _ in range(5):
        began = time.monotonic()
        admin.list_topics(timeout=10)
        took.append(time.monotonic() - began)
    return sorted(took)[2]


def _third_processor(walk: Walk) -> Step:
    """proc-3's files (proc-1's, with its own address) and the step that starts it."""
    name, address = EXTRA_PROCESSOR
    files = walk.files
    files.etc(name).mkdir(parents=True, exist_ok=True)
    for copied in ("ca.pem", "coordinator.token"):
        shutil.copy2(files.etc("proc-1") / copied, files.etc(name) / copied)
    proc1 = next(h for h in HOSTS if h.name == "proc-1")
    text = walk.config_path("proc-1").read_text().replace(str(files.root("proc-1")),
                                                         str(files.root(name)))
    (files.etc(name) / "job.toml").write_text(text.replace(proc1.address, address))
    return Step(name, "daemon", "baton processor -c /etc/baton/job.toml --id p3", "joins")


def _pauses(lan: Lan, walk: Walk, moved: list[str], since_ms: int) -> list[float]:
    """Each moved task's pause (s): the largest gap between the broker's append times of
    consecutive outputs of its partition since `since_ms` (the job's keys go to the same
    partition number of the output as of the input: the same partitioner and counts)."""
    stamps: dict[int, list[int]] = {}
    for m in lan.broker.read_all(walk.name("output")):
        if m.timestamp()[1] >= since_ms:
            stamps.setdefault(m.partition(), []).append(m.timestamp()[1])
    gaps = []
    for task in moved:
        times = sorted(stamps.get(int(task.split()[-1]), []))
        gaps.append(max(b - a for a, b in zip(times, times[1:], strict=False)) / 1000)
    return gaps


def _scale_out_pauses(lan: Lan, walk: Walk, join: Step) -> list[float]:
    """p3 joins (a task moves to it), then is drained (it moves back): each moved task's
    largest pause over both handoffs."""
    before = _holding(walk)
    since = int(time.time() * 1000)
    p3 = walk.start(join)
    _baton(walk, Step("ops", "baton", "baton wait -c /etc/baton/job.toml --until balanced "
                                      "--processors p3 --timeout 120", ""))
    moved = _holding(walk)["p3"]
    assert moved and all(task in before["p1"] + before["p2"] for task in moved)
    _baton(walk, Step("ops", "baton", "baton drain -c /etc/baton/job.toml --processor p3 "
                                      "--wait", ""))
    assert p3.wait(30) == 0
    del walk.running[join.host]
    return _pauses(lan, walk, moved, since)


@pytest.fixture
def sidecars(lan: Lan) -> Iterator[Sidecars]:
    proxies = Sidecars(lan.delay_file)
    yield proxies
    proxies.close()


def test_handoff_pause_under_latency_between_hosts(lan, tmp_path, daemons, unique,
                                                   sidecars) -> None:
    walk, feeder = _running(lan, tmp_path, daemons, unique, append_times=True,
                            sidecars=sidecars)
    join = _third_processor(walk)
    _via_sidecars(walk, sidecars, join.host)
    plain_rtt = _round_trip_s(lan)
    plain = _scale_out_pauses(lan, walk, join)
    lan.delay(DELAY_MS)
    try:
        slow_rtt = _round_trip_s(lan)
        assert slow_rtt >= 2 * DELAY_MS / 1000, (plain_rtt, slow_rtt)   # the proxy works
        slow = _scale_out_pauses(lan, walk, join)
    finally:
        lan.delay(0)
    FAULT_FIGURES["Kafka round trip from the operator's host, no latency added"] = plain_rtt
    FAULT_FIGURES[f"Kafka round trip, {DELAY_MS} ms added each way"] = slow_rtt
    FAULT_FIGURES["handoff pause, scale-out then drain, largest, no latency added"] = \
        max(plain)
    FAULT_FIGURES[f"handoff pause, scale-out then drain, largest, {DELAY_MS} ms added each "
                  "way"] = max(slow)
    # the pause stays a handful of round trips, not a matter of seconds
    assert max(slow) < 5.0, slow
    _verify(f"{DELAY_MS} ms each way to Kafka and coordinators", lan, walk, feeder)
