"""Baton's daemons (coordinator, processors) as subprocesses of a test, and a client of
the coordinator once it answers. tests/conftest.py's `daemons` fixture starts them and
kills what is left at teardown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["PATIENT_CLIENT_S", "Daemon", "coordinator_client", "wait_for_coordinator"]


class Daemon:
    """One `baton ...` daemon subprocess with its own log file; stopped by its test.
    `env` adds to (or overrides) the environment, BATON_LOG_LEVEL=INFO included;
    `prefix` runs it through another command (`ip netns exec NS`: on another host,
    orchestrator/devkit/hosts.py), which execs it under the same PID."""

    def __init__(self, name: str, args: list[str], log: Path,
                 env: dict[str, str] | None = None, prefix: list[str] | None = None) -> None:
        self.name, self.args, self.log_path = name, args, log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*(prefix or []), sys.executable, "-m", "orchestrator.cli", *args], stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                cwd=Path(__file__).resolve().parents[1],
                env={**os.environ, "BATON_LOG_LEVEL": "INFO", **(env or {})})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (graceful), then wait; SIGKILL if it does not exit in time."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, like a crashed host."""
        if self.running():
            self.proc.kill()
        self.proc.wait(30)



def coordinator_client(config: Any, retry: dict[str, Any] | None = None) -> Any:
    """A CoordinatorClient with the token from the config's token file (and its TLS
    settings, as the CLI uses them)."""
    from orchestrator.wire.client import CoordinatorClient
    from orchestrator.wire.token import read_token

    return CoordinatorClient.for_config(config, read_token(config.token_file), retry)


# how long the tests' client retries a call no leader answers: a leader that could not
# write its stream within three quarters of the tests' short takeover_ms (2 s) answers
# 503 until its next write succeeds, which a loaded machine can delay by seconds; an
# operator's `baton` command rides that out the same way (orchestrator/wire/client.py)
PATIENT_CLIENT_S = 20.0


def wait_for_coordinator(config: Any, daemon: Daemon, timeout: float = 60.0) -> Any:
    """Wait until the coordinator answers /status; returns a client that retries a call
    for up to PATIENT_CLIENT_S while no leader answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not daemon.running():
            raise AssertionError(f"coordinator exited with {daemon.proc.returncode}:\n"
                                 f"{daemon.log()[-3000:]}")
        if config.token_file.exists():
            from tenacity import stop_after_attempt, stop_after_delay, wait_fixed

            client = coordinator_client(config, {"stop": stop_after_attempt(1)})
            try:
                client.status()
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.1)
                continue
            finally:
                client.close()
            return coordinator_client(config, {"stop": stop_after_delay(PATIENT_CLIENT_S),
                                               "wait": wait_fixed(0.2)})
        time.sleep(0.1)
    raise AssertionError(f"coordinator not up in {timeout:.0f}s:\n{daemon.log()[-3000:]}")
