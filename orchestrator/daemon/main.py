"""`baton coordinator`: the coordinator daemon's wiring and its loops.

Start-up, in this order, each step before anything the next one could break:
token file (refuse one others can read), listening socket (a second coordinator on
the same address fails here, before it fences anyone), the coordinator-stream topic,
the stream itself (init_transactions fences any previous coordinator, then the
stream is read to its end and the core rebuilt, handoffs in flight resumed), the
first grouping on a fresh job, with catch_up.source = "changelog" the changelog
mapping and topic (orchestrator/core/changelog.py: created when missing, grown for
new tasks, refused with exit 2 when not compacted or short of partitions), the HTTP
server thread, then the main loop.

The main thread owns the loop: a tick every `_TICK_S` (timeouts, assignment),
offsets every `_OFFSETS_S`, the partition monitor every `monitor_interval_ms`, and a
keepalive write when the stream was idle for `_KEEPALIVE_S`. Signal handlers only
set the stop flag. Exit codes: 0 on SIGTERM/SIGINT, 1 when start-up fails, 2 for a
bad token file (configuration), 3 when another coordinator fenced this one.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import ssl
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from confluent_kafka import KafkaException
from prometheus_client import CollectorRegistry

from metrics import CoordinatorMetrics
from orchestrator.core.changelog import plan_changelog_topic
from orchestrator.core.coordinator import Coordinator, CoreConfig
from orchestrator.core.grouping import GroupingError
from orchestrator.core.model import JobModel
from orchestrator.daemon.api import create_app
from orchestrator.daemon.credentials import Credentials
from orchestrator.daemon.limits import BodyLimit
from orchestrator.daemon.monitor import PartitionMonitor
from orchestrator.daemon.service import CoordinatorService
from orchestrator.daemon.tls import PeerNameProtocol, server_context
from orchestrator.kafka.stream import CoordinatorStream, FencedError, StreamError
from orchestrator.kafka.topics import TopicAdmin, TopicsError
from orchestrator.wire.changelog import changelog_topic
from orchestrator.wire.clock import Clock, Deadline, SystemClock
from orchestrator.wire.config import Config
from orchestrator.wire.token import TokenError

__all__ = ["EXIT_FENCED", "StartupError", "run_coordinator"]

log = logging.getLogger("baton.coordinator")

EXIT_FENCED = 3
# The tick: how quickly timeouts fire and new reports turn into moves. 200 ms keeps a
# handoff's coordinator round trip well under a processor heartbeat.
_TICK_S = 0.2
# Watermarks and committed offsets feed lags and plans; once a second is plenty.
_OFFSETS_S = 1.0
# An idle coordinator writes this often, so a fenced one notices within seconds.
_KEEPALIVE_S = 3.0
# uvicorn finishes in-flight requests within this on shutdown.
_HTTP_STOP_S = 5.0


class StartupError(RuntimeError):
    """The daemon cannot start; the message says why and what to do."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def run_coordinator(config: Config, clock: Clock | None = None) -> int:
    """Run the coordinator until SIGTERM (0) or until fenced (3)."""
    clock = clock or SystemClock()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        daemon = _Daemon(config, clock, stop)
    except StartupError as exc:
        log.error("%s", exc)
        return exc.exit_code
    signal.signal(signal.SIGHUP, lambda signum, frame: daemon.reload.set())
    return daemon.run()


def _http_config(app: Any, tls: ssl.SSLContext | None) -> uvicorn.Config:
    """uvicorn's settings; with TLS our context (mutual TLS: the peer-name protocol)."""
    options: dict[str, Any] = {}
    if tls is not None:
        options["ssl_context_factory"] = lambda config, default: tls
        if tls.verify_mode == ssl.CERT_REQUIRED:
            options["http"] = PeerNameProtocol
    return uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                          timeout_graceful_shutdown=int(_HTTP_STOP_S), **options)


def _bind(listen: str) -> socket.socket:
    """Bind exactly the configured host:port, before anything else can fail on it."""
    host, _, port = listen.rpartition(":")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        family, _, _, _, address = infos[0]
        # proto named: asyncio sets TCP_NODELAY on accepted connections only when the
        # listener's proto is IPPROTO_TCP; without it every reply's body waited ~40 ms on
        # Nagle and the client's delayed ACK, twice per heartbeat, inside every handoff
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise StartupError(f"cannot listen on {listen} (coordinator.listen): {exc.strerror or exc}"
                           f"; is another coordinator running there?") from exc
    sock.set_inheritable(False)
    return sock


class _Daemon:
    """Everything the daemon owns, built in start-up order (see the module docstring)."""

    def __init__(self, config: Config, clock: Clock, stop: threading.Event) -> None:
        self.config, self.clock, self.stop = config, clock, stop
        self.reload = threading.Event()     # SIGHUP: re-read the token files
        c = config.coordinator
        try:
            self.credentials = Credentials(config.token_file, config.file(c.processor_token_file),
                                           c.token_grace_ms / 1000)
        except TokenError as exc:
            raise StartupError(f"{exc} (coordinator.token_file or processor_token_file in "
                               f"{config.path})", 2) from exc
        try:
            tls = server_context(config.path_of(c.tls_cert_file), config.path_of(c.tls_key_file),
                                 config.file(c.tls_client_ca_file)) if c.tls_cert_file else None
        except ValueError as exc:
            raise StartupError(f"{exc} (in {config.path})", 2) from exc
        self.sock = _bind(config.coordinator.listen)
        settings = config.kafka_settings()
        self.admin = TopicAdmin(settings, f"baton.{config.job.name}")
        self.stream = CoordinatorStream(settings, config.job.name)
        self.registry = CollectorRegistry()
        metrics = CoordinatorMetrics(self.registry, config.job.name,
                                     acceptable_lag=config.catch_up.acceptable_lag)
        try:
            core = self._core(metrics)
            if config.catch_up.source == "changelog":
                self._changelog(core)
            elif core.model.changelog:
                core.adopt_model(core.model.without_changelog())
                log.warning("catch_up.source = \"input\": the changelog mapping is retired; "
                            "back on the changelog source the tasks get fresh partitions")
        except (TopicsError, StreamError, KafkaException, GroupingError) as exc:
            self.close()
            raise StartupError(f"cannot start the coordinator of job {config.job.name!r}: "
                               f"{exc}") from exc
        except StartupError:
            self.close()
            raise
        url = config.coordinator.url.rstrip("/")
        self.service = CoordinatorService(
            core, self.stream.write, self.admin, config.job.inputs,
            {"coordinator": {"url": url, "metrics_url": f"{url}/metrics",
                             "listen": config.coordinator.listen}})
        self.service.commit()
        self.monitor = PartitionMonitor(self.admin, self.service, config.job.inputs,
                                        config.coordinator.monitor_interval_ms / 1000, clock)
        app = create_app(self.service, self.credentials, self.registry,
                         bind_ids=bool(c.tls_client_ca_file))
        self.server = uvicorn.Server(_http_config(BodyLimit(app, c.max_request_bytes), tls))
        self.http = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                     name="baton-http", daemon=True)

    def reload_credentials(self) -> None:
        """SIGHUP: re-read the token files; a bad file keeps the old tokens."""
        self.reload.clear()
        try:
            changed = self.credentials.reload()
        except TokenError as exc:
            log.error("SIGHUP: %s; the current tokens stay in force", exc)
            return
        if not changed:
            log.info("SIGHUP: the token files are unchanged")

    def _core(self, metrics: CoordinatorMetrics) -> Coordinator:
        """Fence, read the stream, rebuild; on a fresh job group the inputs."""
        core_config = CoreConfig.from_config(self.config)
        self.admin.ensure_compacted(self.stream.topic)
        records = self.stream.open()
        core = Coordinator.restore(core_config, self.clock, records, metrics)
        if core is not None:
            log.info("resumed job %s at generation %d: %d processor(s), %d handoff(s) in "
                     "flight", self.config.job.name, core.model.generation,
                     len(list(core.processors)), len(core.handoffs))
            return core
        counts = self.admin.partition_counts(self.config.job.inputs)
        model = JobModel.first([(t, counts[t]) for t in self.config.job.inputs],
                               self.config.job.grouping)
        log.info("new job %s: %d task(s) from %s (%s grouping)", self.config.job.name,
                 len(model.tasks), counts, self.config.job.grouping)
        return Coordinator(core_config, self.clock, model, metrics)

    def _changelog(self, core: Coordinator) -> None:
        """Give every task a changelog partition and make the topic fit the mapping.

        Raises:
            StartupError: (exit 2) the topic is not compacted or lacks partitions.
            TopicsError: the broker refused to describe, create or grow it.
        """
        topic = changelog_topic(self.config.job.name)
        model = core.model.with_changelog()
        shape = self.admin.describe(topic, ["cleanup.policy"])
        plan = plan_changelog_topic(topic, None if shape is None else shape.partitions,
                                    None if shape is None else shape.config.get("cleanup.policy"),
                                    model.changelog, core.model.changelog_written())
        if plan.problem is not None:
            raise StartupError(f"{plan.problem} (catch_up.source = \"changelog\" in "
                               f"{self.config.path})", 2)
        if plan.create:
            self.admin.ensure_topic(topic, plan.create, {"cleanup.policy": "compact"},
                                    what="the changelog")
        if plan.grow_to:
            self.admin.create_partitions(topic, plan.grow_to)
        if model is not core.model:
            core.adopt_model(model)
            log.info("changelog %s: task -> partition %s (generation %d)", topic,
                     model.changelog, model.generation)

    def run(self) -> int:
        self.http.start()
        log.info("coordinator of job %s listening on %s (pid %d)", self.config.job.name,
                 self.config.coordinator.listen, os.getpid())
        code = 0
        offsets, keepalive = Deadline(self.clock), Deadline(self.clock)
        offsets.arm(0)
        keepalive.arm(_KEEPALIVE_S)
        try:
            while not self.stop.is_set():
                self._guard(self.service.tick)
                if self.reload.is_set():
                    self.reload_credentials()
                if offsets.expired():
                    offsets.arm(_OFFSETS_S)
                    self._guard(self.service.refresh_offsets)
                self._guard(self.monitor.poll_if_due)
                if keepalive.expired():
                    keepalive.arm(_KEEPALIVE_S)
                    if self.clock.monotonic() - self.service.last_write >= _KEEPALIVE_S:
                        self._guard(lambda: self.service.keepalive(self._identity()))
                if self.service.fenced is not None:
                    raise self.service.fenced
                if not self.http.is_alive():
                    log.error("the HTTP server stopped unexpectedly; exiting")
                    code = 1
                    break
                self.service.fenced_event.wait(_TICK_S)
        except FencedError as exc:
            log.error("fenced: %s. Exiting with code %d; the newer coordinator of job %s "
                      "owns the job now", exc, EXIT_FENCED, self.config.job.name)
            code = EXIT_FENCED
        finally:
            self.close()
        if code == 0:
            log.info("coordinator stopped cleanly")
        return code

    def _guard(self, step: Callable[[], Any]) -> None:
        """Run one loop step; transient I/O trouble is logged and retried next time."""
        try:
            step()
        except FencedError:
            raise
        except (StreamError, TopicsError, KafkaException) as exc:
            log.warning("%s failed (will retry): %s", getattr(step, "__name__", "step"), exc)

    def _identity(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname(),
                "listen": self.config.coordinator.listen, "at": self.clock.time()}

    def close(self) -> None:
        """Stop the HTTP thread, then the Kafka clients; bounded, idempotent."""
        server = getattr(self, "server", None)
        if server is not None:
            server.should_exit = True
            http = getattr(self, "http", None)
            if http is not None and http.is_alive():
                http.join(_HTTP_STOP_S + 1)
        self.sock.close()
        self.stream.close()
        self.admin.close()
