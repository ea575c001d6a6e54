"""The embedded Kafka-protocol broker (noida-db) for the demo and the tests.

Only this module knows noida-db's quirks: it answers a fetch with the whole backlog
whatever the size limits say (clients need `receive.message.max.bytes` raised), it
keeps data in memory and persists it on a clean stop (SIGINT/SIGTERM) and, while
writes go on, every few seconds too (its `autosave` thread rewrites everything it holds
as one JSON file: ~0.45 core with 1,000,000 records held, bench/broker_autosave.py;
started here, that thread runs at SCHED_IDLE), and it does not compact. A read_committed
fetch that starts past an aborted transaction's marker returns nothing more from that
producer (it lists every aborted transaction of the partition, finished ones included,
and librdkafka then waits for their markers forever), so changelog reads start from the
partition's beginning here
(`catch_up.changelog_read_from = "beginning"`); a read that passes such a marker skips
that producer's later transactions too (every owner of a task writes under one
transactional id), which an activation repairs by replaying the input
(docs/operations.md, "Brokers without long polls"). On SIGTERM it saves first and keeps
answering for a few tens of milliseconds, acknowledging writes it then loses, so a
clean stop here first stops its Kafka service through its own control command, which
closes the listener and then saves. Baton's
own logic never depends on any of this.

Each setting of the embedded profile below is measured on Apache Kafka too, with and
without it (docs/performance.md, "Embedded-only settings, measured on Apache Kafka"):
Kafka needs none of them, and the production defaults are the ones to run it with.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from importlib.resources import files
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka.admin import AdminClient

__all__ = ["EMBEDDED_CATCH_UP_SETTINGS", "EMBEDDED_CLIENT_SETTINGS", "EMBEDDED_KAFKA_SETTINGS",
           "EMBEDDED_PROCESSOR_SETTINGS",
           "EmbeddedBroker", "EmbeddedBrokerError", "free_port"]

# noida-db sends whole backlogs regardless of fetch.max.bytes; librdkafka loops on
# "Invalid response size" unless it may receive that much (bench/replay_fetch.py; Apache
# Kafka keeps to fetch.max.bytes, and a replay there needs librdkafka's default).
EMBEDDED_CLIENT_SETTINGS: dict[str, Any] = {"receive.message.max.bytes": 1_000_000_000}
# The [kafka] table of Baton's own daemons here (their producers and admin clients
# leave the consumer-only settings out: orchestrator/kafka/settings.py): on top of the
# above, a consumer fetches a partition again only once its queue of fetched records is
# empty (librdkafka refetches below 100,000 queued). noida-db answers a fetch with the
# partition's whole backlog, and an empty one at once: a replay draining a fetched
# backlog refetched the partition all the while, and each answer came back empty at
# once, a spin of the consumer and the broker beside the catch-up (bench/
# join_catchup.py; docs/performance.md, "Catch-up inside a join"). Apache Kafka sends a partition at
# most max.partition.fetch.bytes a fetch and parks an empty one: no spin there, though
# a replay alone ran faster with this setting on Kafka too (docs/performance.md,
# "Measurements behind the code").
EMBEDDED_KAFKA_SETTINGS: dict[str, Any] = {**EMBEDDED_CLIENT_SETTINGS, "queued.min.messages": 1}
# the [catch_up] settings noida-db needs: a read_committed fetch must not start past an
# aborted transaction (see the module docstring); measured in tests/processor/runtime/
# test_changelog_runtime.py. On Apache Kafka the default ("store") holds (bench/
# handoff_pause.py --source changelog --changelog-read-from store|beginning).
EMBEDDED_CATCH_UP_SETTINGS: dict[str, Any] = {"changelog_read_from": "beginning"}
# the [processor] settings: noida-db answers an empty fetch at once, whatever
# fetch.wait.max.ms says, so every idle consumer spins (a large part of a core in the
# client and in the broker: bench/idle_consumer.py); an idle active consumer
# stops fetching for 10 ms at a time instead (processor/runtime/idle_fetch.py). Apache
# Kafka parks an empty fetch for fetch.wait.max.ms: there the back-off saves nothing and
# the default (0) is right (bench/idle_consumer.py --processor-backoffs 0 10).
EMBEDDED_PROCESSOR_SETTINGS: dict[str, Any] = {"idle_fetch_backoff_ms": 10}
_AUTOSAVE_WAIT_S = 5.0    # how long start() looks for the autosave thread
_START_TIMEOUT_S = 30.0
_STOP_GRACE_S = 10.0
_SERVICE_STOP_TIMEOUT_S = 30.0


class EmbeddedBrokerError(RuntimeError):
    """The embedded broker could not start or answer."""


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _binary() -> Path:
    """The binary the package ships: its console script forks it, so its PID is useless."""
    name = "noida-db.exe" if os.name == "nt" else "noida-db"
    path = Path(str(files("noida_db").joinpath(name)))
    if not path.is_file():
        raise EmbeddedBrokerError(f"noida-db binary not found at {path}; reinstall noida-db")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


class EmbeddedBroker:
    """One noida-db Kafka broker on 127.0.0.1, started and stopped by its owner."""

    def __init__(self, data_dir: Path | None = None, port: int | None = None) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="baton-broker-")
            data_dir = Path(self._tmp.name)
        self.data_dir = data_dir
        self.port = port or free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def client_settings(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **EMBEDDED_CLIENT_SETTINGS}

    def start(self) -> str:
        """Start the broker and wait until a metadata request answers."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = (self.data_dir / "broker.log").open("ab")
        cmd = [str(_binary()), "start", "--data-dir", str(self.data_dir / "data"),
               "--host", "127.0.0.1", "--only", "kafka", "--kafka-port", str(self.port)]
        self._proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        log.close()
        self._wait_ready()
        self._defer_autosave()
        return self.bootstrap

    def _defer_autosave(self) -> None:
        """Give noida-db's autosave thread only CPU nothing else wants (SCHED_IDLE): while
        writes go on it rewrites all it holds every few seconds, and on a two-core
        machine it took up to half a core from the daemons under test (bench/
        join_catchup.py). A clean stop still saves everything. Linux only; elsewhere,
        or if the thread is gone, autosave keeps its share.

        The broker may answer before its autosave thread exists or has its name (seen on
        a loaded host), so the thread is looked for again for up to `_AUTOSAVE_WAIT_S`."""
        if self._proc is None or not hasattr(os, "sched_setscheduler"):
            return
        deadline = time.monotonic() + _AUTOSAVE_WAIT_S
        while not self._deferred(self._proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    @staticmethod
    def _deferred(pid: int) -> bool:
        """Set the autosave thread of `pid` to SCHED_IDLE; False while it is not there
        (or the process is gone)."""
        try:
            threads = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            return True         # gone: nothing to wait for
        found = False
        for thread in threads:
            try:
                if (thread / "comm").read_text().strip() == "autosave":
                    os.sched_setscheduler(int(thread.name), os.SCHED_IDLE, os.sched_param(0))
                    found = True
            except OSError:
                continue
        return found

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise EmbeddedBrokerError(
                    f"noida-db exited with {self._proc.returncode}; see {self.data_dir}/broker.log")
            try:
                admin.list_topics(timeout=1)
                return
            except Exception:  # noqa: BLE001 - not answering yet is the expected case
                time.sleep(0.1)
        self.stop()
        raise EmbeddedBrokerError(f"noida-db on {self.bootstrap} did not answer in "
                                  f"{_START_TIMEOUT_S:.0f}s; see {self.data_dir}/broker.log")

    def stop(self) -> None:
        """Clean stop (which is also when noida-db persists its data), then kill."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        self._stop_service()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        """Stop cleanly and start again on the same port with the same data."""
        self.stop()
        self.start()

    def _stop_service(self) -> None:
        """Close the Kafka listener, then save: nothing acknowledged is lost."""
        cmd = [str(_binary()), "stop", "kafka", "--data-dir", str(self.data_dir / "data")]
        try:
            subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=_SERVICE_STOP_TIMEOUT_S,
                           check=False)
        except subprocess.TimeoutExpired:
            pass            # SIGTERM still saves, with its short window

    def kill(self) -> None:
        """Hard stop: noida-db loses whatever it held in memory."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
