"""End to end: `[kafka]` values from a 0600 file and from the environment reach
librdkafka in real daemons, and never appear in their logs.

`client.id` comes from a file: librdkafka uses it in every line it logs and in its
configuration dump (`debug = "conf"`, daemons at DEBUG), so a `client.id = [redacted]`
line proves the value reached librdkafka and was masked on the way out. `sasl.password`
comes from the environment (librdkafka accepts and ignores it under plaintext); its
dump line proves it was set. The job processes records exactly once meanwhile.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from orchestrator.devkit.embedded import free_port
from orchestrator.wire.secrets import REDACTED
from tests.daemon_support import wait_for_coordinator
from tests.feeder import Feeder
from tests.orchestrator.test_e2e import finish, processor_config
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

DEBUG = {"BATON_LOG_LEVEL": "DEBUG"}
DAEMONS = [["coordinator"], ["processor", "--id", "p1"]]


def test_secrets_reach_librdkafka_and_never_the_logs(job, broker, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    client_id = f"client-id-from-file-{uuid.uuid4().hex}"
    password = f"password-from-env-{uuid.uuid4().hex}"
    secret_file = tmp_path / "client.id"
    secret_file.write_text(client_id + "\n")
    secret_file.chmod(0o600)
    monkeypatch.setenv("BATON_TEST_KAFKA_PASSWORD", password)   # the daemons inherit it
    j = job(kafka={"client.id": {"file": "client.id"},
                   "sasl.password": {"env": "BATON_TEST_KAFKA_PASSWORD"},
                   "security.protocol": "plaintext", "debug": "conf"})
    assert j.config.kafka_settings()["client.id"] == client_id

    j.coordinator = j.daemons("coordinator", "coordinator", "-c", j.path, env=DEBUG)
    j.client = wait_for_coordinator(j.config, j.coordinator)
    p1 = j.daemons("p1", "processor", "-c", processor_config(j.path, "p1"), "--id", "p1",
                   env=DEBUG)
    j.processors["p1"] = p1
    wait_for(lambda: len(j.holding().get("p1", [])) == 4 and j.balanced(), 90,
             "p1 holding every task")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=20, rate=500.0).start()
    wait_for(lambda: feeder.sent > 500, 30, "some traffic")
    finish(j, feeder, broker)
    assert p1.stop() == 0
    assert j.coordinator.stop() == 0

    for daemon in (p1, j.coordinator):
        log = daemon.log()
        assert client_id not in log, f"{daemon.name} logged the client.id from the file"
        assert password not in log, f"{daemon.name} logged the password from the env"
        assert f"client.id = {REDACTED}" in log, f"{daemon.name}: no librdkafka config dump"
        assert "sasl.password = [redacted]" in log           # librdkafka's own redaction
        assert f"'sasl.password': '{REDACTED}'" in log        # Baton's start-up line
        assert f"'client.id': '{REDACTED}'" in log


def _baton(tmp_path: Path, daemon: list[str], kafka: str,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a daemon on a config of its own with `kafka` (TOML lines) in [kafka]."""
    path = tmp_path / "job.toml"
    path.write_text('[job]\nname = "x"\nclass = "processor.examples:RunningSum"\n'
                    'inputs = ["in"]\noutput = "out"\n'
                    f'[coordinator]\nlisten = "127.0.0.1:{free_port()}"\n'
                    f'[kafka]\nbootstrap_servers = "127.0.0.1:1"\n{kafka}\n')
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", daemon[0], "-c",
                           str(path), *daemon[1:]], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2],
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("daemon", DAEMONS)
def test_daemons_exit_2_naming_key_and_file(tmp_path: Path, daemon: list[str]) -> None:
    """A secret file others may read stops both daemons before anything starts."""
    secret_file = tmp_path / "kafka.password"
    secret_file.write_text("hunter2-do-not-print\n")
    secret_file.chmod(0o644)
    result = _baton(tmp_path, daemon, 'sasl.password = { file = "kafka.password" }')
    assert result.returncode == 2, result.stderr
    assert (f"{tmp_path / 'job.toml'}: kafka.sasl.password: secret file {secret_file}"
            in result.stderr)
    assert "mode 0644" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr


@pytest.mark.parametrize("daemon", DAEMONS)
def test_a_secret_librdkafka_refuses_is_not_echoed(tmp_path: Path, daemon: list[str]) -> None:
    """librdkafka quotes a value it refuses; the daemon's crash log masks it."""
    result = _baton(tmp_path, daemon, 'security.protocol = { env = "BATON_TEST_PROTOCOL" }',
                    {"BATON_TEST_PROTOCOL": "not-a-protocol-s3cr3t"})
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert 'Invalid value "[redacted]" for configuration property "security.protocol"' \
        in output, output[-3000:]
    assert "s3cr3t" not in output
