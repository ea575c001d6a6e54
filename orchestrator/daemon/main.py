"""`baton coordinator`: the coordinator daemon's wiring and its loops.

Start-up, in this order, each step before anything the next one could break: token
files (refuse ones others can read), TLS files, the listening socket (a second
coordinator on the same address fails here), the coordinator-stream topic, the HTTP
server thread (a `Gate`: a standby's answers until this coordinator leads), then the
stream is read and the main loop runs.

Leadership (docs/design.md, "The coordinator"): a coordinator leads when nobody does (a
fresh job, a resigned leader) or when the leader has written nothing to the stream
for `coordinator.takeover_ms` while the broker answered. Taking over opens the
stream's transactional producer, which fences every earlier writer: a deposed
leader's next write fails, and it steps down to a standby instead of exiting. The
leader writes its "leader" record every quarter of `takeover_ms`; on SIGTERM it
writes a resignation, so a standby takes over at once.

The main thread owns the loop: a tick every `_TICK_S`. Signal handlers only set
flags. Exit codes: 0 on SIGTERM/SIGINT, 1 when start-up fails (a listen port still in
use after `coordinator.bind_timeout_ms` included: a supervisor restarts it), 2 for bad
configuration (a token file others can read, unreadable TLS files, a listen address
that is not this host's).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import ssl
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

import anyio.to_thread
import uvicorn
from confluent_kafka import KafkaException
from prometheus_client import CollectorRegistry

from metrics import CoordinatorMetrics, register_daemon_metrics
from orchestrator.core.discovery import sd_from_records
from orchestrator.core.grouping import GroupingError
from orchestrator.daemon.api import create_app
from orchestrator.daemon.credentials import Credentials
from orchestrator.daemon.gate import Gate, Lease
from orchestrator.daemon.leader import ChangelogTopicError, Leadership
from orchestrator.daemon.limits import BodyLimit
from orchestrator.daemon.standby_tokens import StandbyTokenCheck
from orchestrator.daemon.tls import PeerNameProtocol, server_context
from orchestrator.kafka.stream import FencedError, StreamError, StreamTail, stream_topic
from orchestrator.kafka.topics import TopicAdmin, TopicsError
from orchestrator.wire.binding import bind_retrying, in_use
from orchestrator.wire.clock import Clock, SystemClock
from orchestrator.wire.collector import Collector
from orchestrator.wire.config import Config
from orchestrator.wire.tls import TlsSettings
from orchestrator.wire.token import TokenError

__all__ = ["CoordinatorDaemon", "StartupError", "own_url", "run_coordinator"]

log = logging.getLogger("baton.coordinator")

# The tick: how quickly timeouts fire and new reports turn into moves. 200 ms keeps a
# handoff's coordinator round trip well under a processor heartbeat.
_TICK_S = 0.2
# a standby that cannot read the stream at all for this many takeover_ms takes that for
# silence: a leader it cannot see may be gone, and taking over fences it if it is not
_BLIND_TAKEOVERS = 3
# uvicorn finishes in-flight requests within this on shutdown.
_HTTP_STOP_S = 5.0


class StartupError(RuntimeError):
    """The daemon cannot start; the message says why and what to do."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def run_coordinator(config: Config, clock: Clock | None = None) -> int:
    """Run the coordinator (leader or standby) until SIGTERM (0)."""
    clock = clock or SystemClock()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        daemon = CoordinatorDaemon(config, clock, stop)
    except StartupError as exc:
        log.error("%s", exc)
        return exc.exit_code
    signal.signal(signal.SIGHUP, lambda signum, frame: daemon.reload.set())
    return daemon.run()


# Worker threads for the API's handlers: long polls and registrations waiting for the
# loop's next decision each hold one, so a fleet starting at once needs many (anyio's
# default is 40; an idle thread costs little).
_HTTP_THREADS = 2048


# Connections waiting to be accepted: a fleet of processors starting at once (after a
# deploy, or a coordinator takeover) connects in the same second; a short queue drops
# their SYNs and each retries a second or more later (the kernel caps it at somaxconn).
_BACKLOG = 2048


class _Server(uvicorn.Server):
    """uvicorn's server with room for `_HTTP_THREADS` handler threads."""

    async def serve(self, sockets: Any = None) -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = _HTTP_THREADS
        await super().serve(sockets=sockets)


def _unconfirmed() -> bool:
    """A standby's gate: no leadership to confirm."""
    return False


def _http_config(app: Any, tls: ssl.SSLContext | None) -> uvicorn.Config:
    """uvicorn's settings; with TLS our context (mutual TLS: the peer-name protocol)."""
    # httptools (C) rather than h11 (pure Python): the parser was a third of a
    # heartbeat's cost at 1,000 processors
    options: dict[str, Any] = {"http": "httptools"}
    if tls is not None:
        options["ssl_context_factory"] = lambda config, default: tls
        if tls.verify_mode == ssl.CERT_REQUIRED:
            options["http"] = PeerNameProtocol
    return uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                          timeout_graceful_shutdown=int(_HTTP_STOP_S), **options)


def _bind(listen: str, timeout_s: float, clock: Clock, stop: threading.Event) -> socket.socket:
    """Bind exactly the configured host:port, before anything else can fail on it; a
    port in use is tried again for `timeout_s` (orchestrator/wire/binding.py), unless
    the daemon is stopped meanwhile (exit 0)."""
    try:
        sock = bind_retrying(lambda: _listen(listen), timeout_s, clock,
                             f"{listen} (coordinator.listen)", stop.is_set)
    except OSError as exc:
        if stop.is_set():
            raise StartupError(f"stopped while {listen} (coordinator.listen) was in use",
                               0) from exc
        busy = in_use(exc)
        raise StartupError(f"cannot listen on {listen} (coordinator.listen): {exc.strerror or exc}"
                           + ("; is another coordinator running there? (tried for "
                              "coordinator.bind_timeout_ms)" if busy else ""),
                           1 if busy else 2) from exc
    sock.set_inheritable(False)
    return sock


def _listen(listen: str) -> socket.socket:
    host, _, port = listen.rpartition(":")
    infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    family, _, _, _, address = infos[0]
    # proto named: asyncio sets TCP_NODELAY on accepted connections only when the
    # listener's proto is IPPROTO_TCP; without it every reply's body waited ~40 ms on
    # Nagle and the client's delayed ACK, twice per heartbeat, inside every handoff
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


class CoordinatorDaemon:
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
        self.sock = _bind(c.listen, c.bind_timeout_ms / 1000, clock, stop)
        self.url = own_url(c.listen, tls is not None, c.urls)
        self.takeover_s = c.takeover_ms / 1000
        settings = config.kafka_settings()
        self.admin = TopicAdmin(settings, f"baton.{config.job.name}", clock=clock)
        self.tail: StreamTail | None = None
        self.lead: Leadership | None = None
        self._sd_read = -1                      # the stream records /sd was made from
        self._last_life = clock.monotonic()     # the leader's last sign of life seen
        self._read_at = clock.monotonic()       # the stream's last answer (life or not)
        try:
            self.admin.ensure_compacted(stream_topic(config.job.name))
        except (TopicsError, KafkaException) as exc:
            self.close()
            raise StartupError(f"cannot start the coordinator of job {config.job.name!r}: "
                               f"{exc}") from exc
        self.registry = CollectorRegistry()
        self.metrics = CoordinatorMetrics(self.registry, config.job.name,
                                          acceptable_lag=config.catch_up.acceptable_lag)
        self.metrics.set_leader(False)
        register_daemon_metrics(self.registry, config.job.name)
        self.gate = Gate(config.job.name, self.registry, TlsSettings(
            config.file(c.tls_ca_file), config.file(c.tls_client_cert_file),
            config.file(c.tls_client_key_file)))
        app = BodyLimit(StandbyTokenCheck(self.gate, self.credentials),
                        c.max_request_bytes)
        self.server = _Server(_http_config(app, tls))
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

    def run(self) -> int:
        self.http.start()
        log.info("coordinator of job %s listening on %s (pid %d), %s", self.config.job.name,
                 self.config.coordinator.listen, os.getpid(), self.url)
        log.info("kafka settings (secrets redacted): %s", self.config.shown_kafka_settings())
        collector = Collector(clock=self.clock)
        try:
            self._first_turn()
            while not self.stop.is_set():
                collector.turn()
                if self.reload.is_set():
                    self.reload_credentials()
                if not self.http.is_alive():
                    log.error("the HTTP server stopped unexpectedly; exiting")
                    return 1
                if self.lead is not None:
                    self._leader_turn(self.lead)
                else:
                    self._standby_turn()
        except StartupError as exc:
            log.error("%s", exc)
            return exc.exit_code
        finally:
            collector.close()
            self.close()
        log.info("coordinator stopped cleanly")
        return 0

    def _first_turn(self) -> None:
        """Read the stream; lead at once when nobody leads (a fresh job, a resigned
        leader, a stream from before standbys), else stand by.

        Raises:
            StartupError: leading failed for a reason a retry will not fix.
        """
        self.tail = StreamTail(self.config.kafka_settings(), self.config.job.name, self.clock)
        try:
            self.tail.catch_up(self.takeover_s)
        except StreamError as exc:
            raise StartupError(f"cannot start the coordinator of job "
                               f"{self.config.job.name!r}: {exc}") from exc
        if self.tail.leader() is not None or not self.tail.at_end:
            self._last_life = self.clock.monotonic()
            self.gate.leader_url = self._leader_url()
            self._publish_sd()
            log.info("standby: job %s is led by %s", self.config.job.name, self.gate.leader_url)
            return
        try:
            self._take_over()
        except ChangelogTopicError as exc:
            raise StartupError(str(exc), 2) from exc
        except (TopicsError, GroupingError) as exc:
            raise StartupError(f"cannot start the coordinator of job "
                               f"{self.config.job.name!r}: {exc}") from exc

    def _standby_turn(self) -> None:
        """Follow the stream; take over after `takeover_ms` of the leader's silence."""
        if self.tail is None:           # stepped down while the stream was unreadable
            self._follow()
            self.stop.wait(_TICK_S)
            return
        alive = self.tail.poll()
        now = self.clock.monotonic()
        if alive is not None:
            self._read_at = now
        blind = alive is None and now - self._read_at >= _BLIND_TAKEOVERS * self.takeover_s
        if alive or (alive is None and not blind):  # life, or no evidence (broker away)
            self._last_life = now
        self.gate.leader_url = self._leader_url()
        self._publish_sd()
        resigned = alive is not None and self.tail.at_end and self.tail.leader() is None
        if resigned or now - self._last_life >= self.takeover_s:
            log.warning("the leader of job %s %s; taking over", self.config.job.name,
                        "resigned" if resigned else
                        f"could not be read for {now - self._read_at:.1f} s" if blind else
                        f"wrote nothing for {now - self._last_life:.1f} s")
            try:
                self._take_over()
            except ChangelogTopicError as exc:
                raise StartupError(str(exc), 2) from exc
            except (FencedError, StreamError, TopicsError, KafkaException,
                    GroupingError) as exc:
                log.error("take-over failed (will retry): %s", exc)
                self._last_life = now
            return
        self.stop.wait(_TICK_S)

    def _take_over(self) -> None:
        lead = Leadership(self.config, self.clock, self.admin, self.metrics, self.url,
                          max(0.25, self.takeover_s / 4))
        if self.tail is not None:
            self.tail.close()
            self.tail = None
        self.lead = lead
        self.gate.sd = None     # the leader's API answers /sd from its own picture
        self.gate.app = create_app(lead.service, self.credentials, self.registry,
                                   bind_ids=bool(self.config.coordinator.tls_client_ca_file))
        self.gate.leader_url = self.url
        guard = lead.service.guard
        lease = Lease(self.clock, lambda: guard.last_write, 0.75 * self.takeover_s)
        self.gate.confirmed = lease
        lead.service.decisions.lease = lease
        self.metrics.set_leader(True)
        log.info("coordinator %s leads job %s", self.url, self.config.job.name)

    def _leader_turn(self, lead: Leadership) -> None:
        try:
            lead.turn()
        except FencedError as exc:
            log.error("deposed: %s; this coordinator is a standby now", exc)
            self._step_down()
            return
        lead.wait(_TICK_S)

    def _step_down(self) -> None:
        """Become a standby. Nothing here ends the daemon: the leadership is abandoned
        whatever its close says, and a tail that cannot be read yet is retried by the
        standby turns. Its metrics stop showing the job (`set_leader(False)`), so sums
        over every coordinator count each processor once."""
        self.gate.app = None
        self.gate.leader_url = None
        self.gate.confirmed = _unconfirmed     # lets go of the deposed leadership's guard
        self.metrics.set_leader(False)
        self._sd_read = -1
        lead, self.lead = self.lead, None
        self._last_life = self.clock.monotonic()
        if lead is not None:
            try:
                lead.close()
            except Exception:   # noqa: BLE001 - discarded either way; say why it failed
                log.exception("closing the deposed leadership failed; standing by anyway")
        self._follow()

    def _follow(self) -> None:
        """Open the stream's tail if need be and read it to its end (at most
        `takeover_s`), so the leader it names is current."""
        try:
            if self.tail is None:
                self.tail = StreamTail(self.config.kafka_settings(), self.config.job.name,
                                       self.clock)
            self.tail.catch_up(self.takeover_s)
        except (StreamError, KafkaException) as exc:
            log.warning("standby: cannot read the stream yet (will retry): %s", exc)
        self.gate.leader_url = self._leader_url()
        self._publish_sd()

    def _publish_sd(self) -> None:
        """Give the gate a standby's `/sd` answer, made again when records arrived and
        the stream is read to its end (a partial read may list processors long dead)."""
        if self.tail is None or not self.tail.at_end or self.tail.records == self._sd_read:
            return
        self._sd_read = self.tail.records
        self.gate.sd = sd_from_records(self.tail.state, self.config.job.name)

    def _leader_url(self) -> str | None:
        leader = self.tail.leader() if self.tail is not None else None
        url = leader.get("url") if leader else None
        return str(url) if url else None

    def close(self) -> None:
        """Refuse requests, resign if leading, stop the HTTP thread, then the Kafka
        clients; bounded, idempotent."""
        gate = getattr(self, "gate", None)
        if gate is not None:
            gate.stopping = True
        if self.lead is not None:
            self.lead.resign()
            self.lead.close()
            self.lead = None
        server = getattr(self, "server", None)
        if server is not None:
            server.should_exit = True
            http = getattr(self, "http", None)
            if http is not None and http.is_alive():
                http.join(_HTTP_STOP_S + 1)
        self.sock.close()
        if self.tail is not None:
            self.tail.close()
            self.tail = None
        self.admin.close()


def own_url(listen: str, tls: bool, urls: Sequence[str] = ()) -> str:
    """The URL clients reach this coordinator at: the one of `coordinator.url` with the
    listening port when exactly one has it, or when several do the one naming this host
    (`http://baton-coordinator-0.baton-coordinator:8700` on the host
    `baton-coordinator-0`: coordinators of a StatefulSet share one list and one port);
    else made from `listen` (a wildcard address advertised by host name)."""
    host, _, port = listen.rpartition(":")
    same_port = [u for u in urls if u.rsplit(":", 1)[-1].rstrip("/") == port]
    if len(same_port) > 1:
        me = socket.gethostname().split(".")[0]
        same_port = [u for u in same_port if _url_host(u).split(".")[0] == me]
    if len(same_port) == 1:
        return str(same_port[0])
    if host in ("0.0.0.0", "::", "[::]", ""):
        host = socket.gethostname()
    return f"{'https' if tls else 'http'}://{host}:{port}"


def _url_host(url: str) -> str:
    return url.split("://", 1)[-1].rsplit(":", 1)[0]
