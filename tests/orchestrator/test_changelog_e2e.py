"""End to end with catch_up.source = "changelog": the coordinator and processor daemons
as subprocesses on the broker, the IdentifiedSum job (a random id per key, drawn the
first time the key is seen, plus a running sum; output "<id>:<sum>") under a live
keyed producer.

Replaying IdentifiedSum's input would give keys new ids, so one id per key in the
output topic, across every move, proves the state was copied through the changelog;
the sums prove nothing was lost or applied twice.

- the coordinator creates `baton.<job>.changelog` (compacted, one partition per task)
  and refuses one that is not compacted or lacks partitions (exit 2, naming it);
- scale out 2 -> 3 under traffic;
- an owner SIGKILLed under traffic (a transaction is open: its changelog records are
  aborted by the next owner's fence) and restarted at once: its new execution
  recovers its tasks from stores a transaction behind, through the changelog.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from orchestrator.wire.changelog import changelog_topic
from tests.conftest import Daemon, Feeder, identified_check, wait_for
from tests.orchestrator.test_e2e import PARTITIONS, ROOT, Job

pytestmark = pytest.mark.integration

CHANGELOG = {"job": {"class": "processor.examples:IdentifiedSum"},
             "catch_up": {"source": "changelog"}}


@pytest.fixture
def changelog_job(coordinated: Any, daemons: Any) -> Callable[..., Job]:
    def make(**sections: dict[str, Any]) -> Job:
        merged = {k: dict(v) for k, v in CHANGELOG.items()}
        for section, values in sections.items():
            merged.setdefault(section, {}).update(values)
        config, path = coordinated(PARTITIONS, **merged)
        return Job(config, path, daemons)
    return make


def _topic_shape(broker: Any, topic: str) -> tuple[int, str]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(10)
    return len(meta.partitions), str(configs["cleanup.policy"].value)


def _start_two(j: Job, broker: Any, rate: float = 400.0) -> Feeder:
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(len(a) for a in j.holding().values()) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    return Feeder(broker, j.config.job.inputs[0], keys=40, rate=rate).start()


def _finish(j: Job, feeder: Feeder, broker: Any) -> Any:
    """Stop the producer, let every record through, run IdentifiedSum's oracle."""
    sent = feeder.stop()
    wait_for(lambda: j.all_consumed(sent), 120, f"all {sent} records consumed")
    result = identified_check(broker, j.config)
    assert result.sums.records_in == sent
    assert result.ok, result
    return result


def _applied_changelog_records(j: Job, pid: str) -> float:
    """What `pid`'s metrics say it applied from the changelog (all tasks)."""
    import urllib.request

    url = next(p["metrics_url"] for p in j.status()["processors"] if p["id"] == pid)
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("baton_catchup_records_total{")
               and 'source="changelog"' in line)


def test_scale_out_keeps_every_keys_id(changelog_job, broker) -> None:
    j = changelog_job()
    feeder = _start_two(j, broker)
    topic = changelog_topic(j.config.job.name)
    assert _topic_shape(broker, topic) == (PARTITIONS, "compact")
    status = j.status()
    assert status["catch_up_source"] == "changelog"
    assert sorted(t["changelog_partition"] for t in status["tasks"]) == list(range(PARTITIONS))
    wait_for(lambda: feeder.sent > 2000, 30, "some traffic")
    j.start_processor("p3")
    waited = j.baton_wait()
    assert waited.returncode == 0, waited.stderr
    holding = j.holding()
    assert holding.get("p3") and sorted(len(a) for a in holding.values()) == [1, 1, 2]
    assert _applied_changelog_records(j, "p3") > 0
    moved = feeder.sent
    wait_for(lambda: feeder.sent > moved + 2000, 60,
             f"traffic after the moves (sent {moved}, thread alive "
             f"{feeder._thread.is_alive()})")
    j.check_running()
    result = _finish(j, feeder, broker)
    assert result.sums.keys == 40


def test_owner_killed_under_traffic_and_restarted(changelog_job, broker) -> None:
    """SIGKILL p1 with transactions open (its changelog records in them are aborted by
    the fence), restart it at once (its new execution recovers its tasks from its
    stores through the changelog), then scale out to p3 and kill p2 too."""
    j = changelog_job(coordinator={"processor_timeout_ms": 3000, "release_timeout_ms": 4000})
    feeder = _start_two(j, broker, rate=800.0)
    wait_for(lambda: feeder.sent > 3000, 30, "traffic")
    j.processors["p1"].kill()
    del j.processors["p1"]
    j.start_processor("p1")
    wait_for(lambda: feeder.sent > 6000, 60, "traffic after the restart")
    j.start_processor("p3")
    wait_for(lambda: bool(j.holding().get("p3")), 90, "p3 holds tasks")
    j.processors["p2"].kill()
    del j.processors["p2"]
    wait_for(lambda: "p2" not in j.holding(), 30, "p2 lost")
    waited = j.baton_wait()
    assert waited.returncode == 0, waited.stderr
    assert sorted(j.holding()) == ["p1", "p3"]
    wait_for(lambda: feeder.sent > 12000, 60, "traffic after the second kill")
    j.check_running()
    _finish(j, feeder, broker)


def _coordinator_refuses(j: Job, daemons: Callable[..., Daemon]) -> str:
    coordinator = daemons("coordinator-refused", "coordinator", "-c", j.path)
    assert coordinator.wait(60) == 2, coordinator.log()[-3000:]
    return coordinator.log()


@pytest.mark.parametrize("shape", ["delete", "too-few"])
def test_a_changelog_topic_that_does_not_fit_is_refused(changelog_job, broker, daemons,
                                                        shape: str) -> None:
    j = changelog_job()
    topic = changelog_topic(j.config.job.name)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    spec = (NewTopic(topic, PARTITIONS, 1, config={"cleanup.policy": "delete"})
            if shape == "delete" else
            NewTopic(topic, PARTITIONS - 1, 1, config={"cleanup.policy": "compact"}))
    admin.create_topics([spec])[topic].result(30)
    log = _coordinator_refuses(j, daemons)
    assert topic in log and "catch_up.source" in log
    assert ("cleanup.policy=delete" in log) if shape == "delete" else \
        (f"{PARTITIONS - 1} partition(s)" in log)


def test_split_stays_refused_under_the_changelog_source(changelog_job, broker) -> None:
    j = changelog_job()
    j.start_coordinator()
    refused = subprocess.run([sys.executable, "-m", "orchestrator.cli", "split", "-c",
                              str(j.path)], capture_output=True, text=True, timeout=60,
                             cwd=ROOT)
    assert refused.returncode == 2 and "changelog" in refused.stderr, refused.stderr


def test_frozen_owner_fenced_mid_transaction(changelog_job, broker) -> None:
    """SIGSTOP p1 (a transaction open, changelog records in it), let the coordinator
    declare it dead and move its tasks; p1 thawed is fenced and exits 3."""
    j = changelog_job(coordinator={"release_timeout_ms": 3000, "processor_timeout_ms": 3000})
    feeder = _start_two(j, broker)
    wait_for(lambda: feeder.sent > 2000, 30, "traffic")
    j.signal(["p1"], signal.SIGSTOP)
    wait_for(lambda: "p1" not in j.holding() and len(j.holding().get("p2", [])) == PARTITIONS,
             90, "p2 to take every task")
    j.signal(["p1"], signal.SIGCONT)
    assert j.processors["p1"].wait(60) == 3, j.processors["p1"].log()[-3000:]
    del j.processors["p1"]
    j.check_running()
    _finish(j, feeder, broker)
