"""`baton processor`: the processor daemon.

One main loop owns the task runtime; the heartbeat monitor thread exchanges snapshots
with it; signal handlers only set flags. SIGTERM is graceful (release every active task
with a commit, say goodbye, exit 0); a coordinator that declares this execution dead, or
a main loop that has not come round for `processor.loop_timeout_ms`, stops every task
without committing (exit 3). With `processor.on_error = "dlq"` a dead-letter topic that
is missing and cannot be created stops the start before anything is processed (exit 2
when the broker refused, 1 when it did not answer); so does a broker that would refuse
every task (a transaction timeout above its limit, an ACL missing on a topic: exit 2,
processor/runtime/preflight.py). A fixed metrics port in use is tried again for
`processor.bind_timeout_ms` (orchestrator/wire/binding.py), then the start fails with
exit 1, which its supervisor restarts.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import uuid
from collections.abc import Callable
from types import FrameType

from prometheus_client import CollectorRegistry

from metrics import ProcessorMetrics, register_daemon_metrics, serve_metrics
from orchestrator.wire.binding import bind_retrying, in_use
from orchestrator.wire.clock import Clock, SystemClock
from orchestrator.wire.collector import Collector
from orchestrator.wire.config import Config
from orchestrator.wire.health import LIVE_PATH, READY_PATH, Probe
from orchestrator.wire.protocol import TaskReport
from orchestrator.wire.tls import TlsSettings
from processor.daemon.disk import StateDisk
from processor.daemon.heartbeat import EXIT_DEAD, HeartbeatMonitor
from processor.runtime import TaskRuntime
from processor.runtime.dead_letters import DeadLetterTopicError
from processor.runtime.preflight import PreflightError, check_broker
from store.layout import ProcessorStateDir

__all__ = ["ROUND_S", "run_processor"]

log = logging.getLogger("baton.processor")

# the main loop's round: it takes the coordinator's orders (a release, an activation)
# between rounds and processes new records within one; transactions still commit every
# commit_interval_ms (a round as long as that made a release wait up to 100 ms for the
# round to end, and a new owner's first output wait a full round after activation)
ROUND_S = 0.01
# The heartbeat's view of the tasks is rebuilt after a round at most this often (a fast
# heartbeat's interval), and at once when a task's role changed: building every task's
# report after every round was about a sixth of a busy processor's Python time, and
# positions a few rounds old tell the coordinator nothing less.
REPORT_EVERY_S = 0.025


def _execution_id() -> str:
    return os.environ.get("EXECUTION_ENV_CONTAINER_ID") or str(uuid.uuid4())


def run_processor(config: Config, processor_id: str, clock: Clock | None = None) -> int:
    """Run until SIGTERM (0), drained (0), or declared dead (3); a dead-letter topic
    that cannot be created stops the start (2, or 1: see above), as do a broker that
    would refuse every task (2), a metrics address that is not this host's (2) and a
    fixed metrics port still in use after `processor.bind_timeout_ms` (1: a supervisor
    restarts it).

    Raises:
        ProcessorDirLocked: another live execution of this id holds its state directory
            (checked first, before anything else starts).
    """
    execution_id = _execution_id()
    with ProcessorStateDir(config.state_dir, config.job.name, processor_id, execution_id):
        return _run(config, processor_id, execution_id, clock or SystemClock())


def _run(config: Config, processor_id: str, execution_id: str, clock: Clock) -> int:
    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry, config.job.name, processor_id)
    register_daemon_metrics(registry, config.job.name)
    port = config.processor.metrics_port_for(processor_id)
    host = config.processor.metrics_host
    probes = _Probes()
    try:
        server, _ = bind_retrying(
            lambda: serve_metrics(registry, host, port, probes.paths()),
            config.processor.bind_timeout_ms / 1000, clock,
            f"processor {processor_id}'s metrics address {host}:{port} "
            f"(processor.metrics_port)")
    except OSError as exc:      # a fixed port in use, or a host that is not this one's
        busy = in_use(exc)
        log.error("processor %s cannot serve its metrics on %s:%d (processor.metrics_host, "
                  "processor.metrics_port in %s): %s%s", processor_id, host, port,
                  config.path, exc.strerror or exc,
                  ", still after processor.bind_timeout_ms; exit 1 (a supervisor starts "
                  "it again)" if busy else "")
        return 1 if busy else 2
    try:
        runtime = TaskRuntime(config, processor_id, metrics=metrics, clock=clock)
    except DeadLetterTopicError as exc:
        server.close()
        log.error("processor %s cannot start: %s", processor_id, exc)
        return exc.exit_code
    try:
        check_broker(config)        # a limit or an ACL that would fail every task: exit 2
    except PreflightError as exc:
        runtime.close(commit=False)
        server.close()
        log.error("processor %s cannot start: %s", processor_id, exc)
        return exc.exit_code
    metrics.set_store_view(lambda: dict(runtime.store_bytes))
    metrics.set_memory_view(runtime.stores.memory_usage)
    snapshot: list[TaskReport] = []
    lock = threading.Lock()

    def reports() -> list[TaskReport]:
        with lock:
            return list(snapshot)

    monitor = HeartbeatMonitor(
        config.coordinator.urls, config.processor_token_file, processor_id, execution_id,
        config.processor.heartbeat_interval_ms / 1000, config.processor.coordinator_grace_ms / 1000,
        reports, metrics_url=server.url, on_heartbeat=metrics.record_heartbeat, clock=clock,
        tls=TlsSettings(config.file(config.coordinator.tls_ca_file),
                        config.file(config.processor.tls_cert_file),
                        config.file(config.processor.tls_key_file)),
        disk_full=StateDisk(config.state_dir, config.processor.min_free_disk_mb << 20).full,
        loop_timeout_s=config.processor.loop_timeout_ms / 1000)
    probes.monitor = monitor
    stop = _Stop(monitor, config.processor.drain_on_stop_ms / 1000, clock)
    signal.signal(signal.SIGTERM, stop.signalled)
    signal.signal(signal.SIGINT, stop.signalled)
    log.info("processor %s (execution %s) starting; coordinator %s", processor_id, execution_id,
             config.coordinator.url)
    log.info("kafka settings (secrets redacted): %s", config.shown_kafka_settings())
    monitor.start()
    collector = Collector()     # full collections paused handoffs (orchestrator/wire/collector.py)
    poll_s = config.processor.commit_interval_ms / 1000
    draining = False
    last_roles: set[tuple[str, str]] = set()
    published_at = -REPORT_EVERY_S
    def publish() -> None:
        """Hand the main loop's view to the heartbeat thread; heartbeat at once when a
        role changed (a release or an activation finished: the coordinator waits)."""
        nonlocal last_roles, published_at
        monitor.busy = runtime.load.busy
        roles = runtime.held_roles()
        now = clock.monotonic()
        if roles == last_roles and now - published_at < REPORT_EVERY_S:
            return
        with lock:
            snapshot[:] = runtime.reports()
        published_at = now
        if roles != last_roles:
            monitor.poke()
            last_roles = roles

    while not stop.due() and not monitor.dead.is_set():
        taken = monitor.take_reply()
        if taken is not None:
            reply, seen_failures = taken
            runtime.apply(reply, seen_failures)
            monitor.generation = runtime.generation
            draining = reply.stop
            publish()
            monitor.settle()
        monitor.fast = runtime.handoff_imminent()
        runtime.poll(min(poll_s, ROUND_S))
        publish()
        collector.turn()
        monitor.loop_came_round()
        if draining and not runtime.active:
            log.info("drained: no active task left")
            break
    monitor.loop_ended()
    try:
        return _shut_down(runtime, monitor, processor_id, snapshot, lock)
    finally:
        collector.close()
        server.close()


def _shut_down(runtime: TaskRuntime, monitor: HeartbeatMonitor, processor_id: str,
               snapshot: list[TaskReport], lock: threading.Lock) -> int:
    if monitor.dead.is_set():
        runtime.close(commit=False)
        monitor.stopping.set()
        log.error("processor %s stopped: %s", processor_id, monitor.dead_reason)
        return EXIT_DEAD
    runtime.close(commit=True)
    with lock:
        snapshot[:] = runtime.reports()
    monitor.leave()
    log.info("processor %s stopped cleanly", processor_id)
    return 0


class _Probes:
    """`/healthz` and `/readyz` on the metrics address: served from the metrics
    server's start, answered by the heartbeat monitor once it exists (live and not yet
    ready before: the processor is starting)."""

    def __init__(self) -> None:
        self.monitor: HeartbeatMonitor | None = None

    def paths(self) -> dict[str, Callable[[], tuple[int, bytes]]]:
        return {LIVE_PATH: lambda: self._answer(live=True),
                READY_PATH: lambda: self._answer(live=False)}

    def _answer(self, live: bool) -> tuple[int, bytes]:
        monitor = self.monitor
        if monitor is None:
            probe = Probe(live, "starting")
        else:
            probe = monitor.live() if live else monitor.ready()
        return probe.status, probe.body()


class _Stop:
    """What SIGTERM (or SIGINT) asks of the main loop. With `drain_on_stop_ms`, the
    first asks the coordinator to drain this processor (its heartbeats say so) and the
    loop runs on until the drain ends (the coordinator's `stop`) or the time is up; a
    second signal, or none of that, stops the loop at once. Either way the stop then
    releases what is left with a last commit."""

    def __init__(self, monitor: HeartbeatMonitor, drain_s: float, clock: Clock) -> None:
        self._monitor, self._drain_s, self._clock = monitor, drain_s, clock
        self._now = threading.Event()
        self._drain_until: float | None = None

    def signalled(self, signum: int, frame: FrameType | None) -> None:
        if self._drain_s <= 0 or self._drain_until is not None:
            self._now.set()
            return
        self._drain_until = self._clock.monotonic() + self._drain_s
        log.info("asked to stop: draining first, for up to %.0fs "
                 "(processor.drain_on_stop_ms; a second signal stops at once)", self._drain_s)
        self._monitor.drain = True
        self._monitor.poke()

    def due(self) -> bool:
        """Stop now: a signal without a drain, a second signal, or the drain's time up."""
        if self._now.is_set():
            return True
        if self._drain_until is not None and self._clock.monotonic() >= self._drain_until:
            log.warning("the drain did not end within processor.drain_on_stop_ms: stopping, "
                        "releasing the tasks still here with a last commit")
            self._now.set()
            return True
        return False
