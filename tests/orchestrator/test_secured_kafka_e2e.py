"""Baton on a secured Apache Kafka: a SASL_SSL listener with SCRAM-SHA-512 and ACLs
enforced (orchestrator/devkit/kafka_secure.py). The coordinator, a processor and the
CLI connect with [kafka] settings whose password comes from a 0600 file, and the job
runs exactly once (catch_up.source = "changelog": the changelog topic too). A principal
denied one operation the processors need (WRITE on the changelog topic) gets a start
error naming the topic and the operation, exit 2, not a retry loop.

The test's own producer and oracle use the PLAINTEXT listener (the super user's)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AclOperation, ResourceType

from orchestrator.devkit.kafka_secure import SecureKafkaBroker
from orchestrator.wire.changelog import changelog_topic
from tests.brokers import Broker
from tests.daemon_support import wait_for_coordinator
from tests.feeder import Feeder
from tests.orchestrator.test_e2e import Job, finish, processor_config
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kafka]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafkaBroker]:
    kafka = SecureKafkaBroker(tmp_path_factory.mktemp("secure"))
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.close()


@pytest.fixture
def broker(secure: SecureKafkaBroker) -> Broker:
    """This module's broker (the job's topics, the feeder and the oracle, in PLAINTEXT)."""
    return Broker(secure.bootstrap, {}, secure)


def _user(secure: SecureKafkaBroker, tmp_path: Path) -> tuple[str, str]:
    """A new SCRAM user allowed what Baton does on its job's resources; its password in
    a 0600 file next to the configs."""
    user, password = f"baton-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    secure.users.add(user, password)
    for resource, prefix in ((ResourceType.TOPIC, "baton."), (ResourceType.TOPIC, "events-"),
                             (ResourceType.TOPIC, "sums-"), (ResourceType.GROUP, "baton."),
                             (ResourceType.GROUP, "e2e-"),
                             (ResourceType.TRANSACTIONAL_ID, "baton.")):
        secure.users.acl(user, resource, prefix, AclOperation.ALL, prefixed=True)
    for operation in (AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                      AclOperation.IDEMPOTENT_WRITE):
        secure.users.acl(user, ResourceType.BROKER, "kafka-cluster", operation)
    secret = tmp_path / "kafka.password"
    secret.write_text(password + "\n")
    secret.chmod(0o600)
    return user, password


def _kafka(secure: SecureKafkaBroker, user: str) -> dict[str, Any]:
    return {"bootstrap_servers": secure.secure_bootstrap, "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": {"file": "kafka.password"}, "ssl.ca.location": str(secure.ca_file)}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_daemons_and_cli_run_a_job_over_sasl_ssl(secure, broker, coordinated, daemons,
                                                  tmp_path: Path) -> None:
    user, password = _user(secure, tmp_path)
    config, path = coordinated(2, kafka=_kafka(secure, user),
                               catch_up={"source": "changelog"})
    assert config.kafka_settings()["sasl.password"] == password
    j = Job(config, path, daemons)
    j.start_coordinator()
    j.start_processor("p1")
    wait_for(lambda: len(j.holding().get("p1", [])) == 2 and j.balanced(), 90,
             "p1 holding both tasks")
    feeder = Feeder(broker, config.job.inputs[0], keys=20, rate=300.0).start()
    wait_for(lambda: feeder.sent > 600, 30, "some traffic")
    finish(j, feeder, broker)
    changelog = broker.read_all(changelog_topic(config.job.name))
    assert changelog, "the processor wrote no changelog"
    check = _cli("check", "-c", str(path))
    assert check.returncode == 0, check.stdout + check.stderr
    assert j.processors["p1"].stop() == 0
    assert j.coordinator is not None and j.coordinator.stop() == 0
    for daemon in (j.processors["p1"], j.coordinator):
        assert password not in daemon.log(), f"{daemon.name} logged the password"
    assert password not in check.stdout + check.stderr


def test_a_missing_acl_is_a_start_error_naming_it(secure, broker, coordinated, daemons,
                                                   tmp_path: Path) -> None:
    user, _ = _user(secure, tmp_path)
    config, path = coordinated(2, kafka=_kafka(secure, user),
                               catch_up={"source": "changelog"})
    topic = changelog_topic(config.job.name)
    secure.users.acl(user, ResourceType.TOPIC, topic, AclOperation.WRITE, allow=False)
    coordinator = daemons("coordinator", "coordinator", "-c", path)
    wait_for_coordinator(config, coordinator)      # it creates the changelog topic
    processor = daemons("p1", "processor", "-c", processor_config(path, "p1"), "--id", "p1")
    assert processor.wait(90) == 2, processor.log()[-3000:]
    log = processor.log()
    assert f"User:{user}" in log and f"WRITE on topic '{topic}'" in log, log[-3000:]
    assert coordinator.stop() == 0


def test_an_activation_denied_its_transactional_id_names_it(secure, broker, job_config,
                                                            tmp_path: Path) -> None:
    """WRITE on the task's transactional id is only asked for when the task activates
    (a probe would fence its owner): the task fails there, naming the id and the ACL."""
    from orchestrator.wire.config import parse_config
    from tests.processor.runtime.runtime_support import assignment_reply, new_runtime, task_model

    user, password = _user(secure, tmp_path)
    raw = job_config(partitions=1, kafka={**_kafka(secure, user), "sasl.password": password})
    config = parse_config(raw)
    transactional_id = f"baton.{config.job.name}.Partition 0"
    secure.users.acl(user, ResourceType.TRANSACTIONAL_ID, transactional_id, AclOperation.WRITE,
               allow=False)
    runtime = new_runtime(raw, tmp_path, "p1")
    try:
        runtime.apply(assignment_reply(task_model(config.job.inputs[0], 1), active=["Partition 0"]))
        wait_for(lambda: "Partition 0" in runtime.failed, 60, "the activation to fail",
                 lambda: runtime.poll(0.05))
        error = runtime.failed["Partition 0"]
        assert f"WRITE on transactional id '{transactional_id}'" in error, error
        assert f"User:{user}" in error and not runtime.active
    finally:
        runtime.close(commit=False)
