"""What a coordinator owns while it leads its job, and its loop turn.

Taking over: `CoordinatorStream.open()` fences every earlier writer (Kafka's
transactional id: a deposed leader's next write fails), then reads the stream to its
end; the core is rebuilt from it with the handoffs in flight, or, on a fresh job, the
inputs are grouped. With catch_up.source = "changelog" the changelog mapping and topic
follow (orchestrator/core/changelog.py: created when missing, grown for new tasks,
refused when not compacted or short of partitions). From then on each turn ticks the
core, refreshes offsets and polls the partition monitor, while a thread of its own
writes the "leader" record every `keepalive_s`: that record is what standbys watch and
what keeps the leader's lease (daemon/gate.py), and a leader that was fenced learns it
at that write. It has its own thread because the turn's admin requests wait on the
broker: on Apache Kafka under load one refresh of offsets took up to 1.8 s, longer than
a lease of three quarters of a 2 s `takeover_ms`, and the leader answered 503 meanwhile.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

from metrics import CoordinatorMetrics
from orchestrator.core.changelog import plan_changelog_topic
from orchestrator.core.coordinator import Coordinator, CoreConfig
from orchestrator.core.model import JobModel
from orchestrator.daemon.monitor import PartitionMonitor
from orchestrator.daemon.service import CoordinatorService
from orchestrator.kafka.stream import CoordinatorStream, FencedError, StreamError
from orchestrator.kafka.topics import TopicAdmin, TopicsError
from orchestrator.wire.changelog import changelog_topic
from orchestrator.wire.clock import Clock, Deadline
from orchestrator.wire.config import Config

__all__ = ["ChangelogTopicError", "Leadership", "paced"]

log = logging.getLogger("baton.coordinator")

# Watermarks and committed offsets feed lags and plans; once a second is plenty.
_OFFSETS_S = 1.0
# Decisions run when a report brings news (the guarded core's `wake`) and at least this
# often for timeouts; the cost of one grows with processors and tasks, the number of
# heartbeats does not add to it.
_DECIDE_S = 0.5
# What /metrics shows of the core is copied this often (a scrape never takes the lock).
_VIEWS_S = 1.0
# The loop's periodic work grows with the job (docs/performance.md, "Measurements behind
# the code"), so each waits at least this many times what it last cost: the timer's
# decisions at most 10% of a core, views and offsets 5% each, decisions on news at most
# a third. A small job never notices.
_DECIDE_SPACING, _NEWS_SPACING, _REFRESH_SPACING = 10.0, 3.0, 20.0
# a keepalive write in flight at a stop is bounded by the stream's commit timeout; the
# stop waits this long for it, then closes the stream under it
_KEEPER_JOIN_S = 5.0


class Leadership:
    """The leader's parts: its stream (fenced open), core, service and monitor.

    Args:
        config: the job's config.
        clock: the daemon's clock.
        admin: the daemon's topic admin.
        metrics: the daemon's coordinator metrics.
        url: this coordinator's own URL (written in the "leader" record).
        keepalive_s: how often the "leader" record is written.

    Raises:
        FencedError, StreamError, TopicsError, KafkaException, GroupingError: the
            take-over failed; nothing is left open.
    """

    def __init__(self, config: Config, clock: Clock, admin: TopicAdmin,
                 metrics: CoordinatorMetrics, url: str, keepalive_s: float) -> None:
        self.config, self.clock, self.url = config, clock, url
        self.stream = CoordinatorStream(config.kafka_settings(), config.job.name, clock)
        try:
            core = self._core(admin, metrics)
            if config.catch_up.source == "changelog":
                _changelog(config, admin, core)
            elif core.picture.model.changelog:
                core.adopt_model(core.picture.model.without_changelog())
                log.warning("catch_up.source = \"input\": the changelog mapping is retired; "
                            "back on the changelog source the tasks get fresh partitions")
            self.service = CoordinatorService(
                core, self.stream.write, admin, config.job.inputs,
                {"coordinator": {"url": url, "metrics_url": f"{url}/metrics",
                                 "listen": config.coordinator.listen, "leader": True}},
                waits=clock)
            self.service.guard.commit()
            self.service.guard.keepalive(self.identity())
        except BaseException:
            self.stream.close()
            raise
        self.service.heartbeats.loop_decides = True     # registrations share the loop's decisions
        self.monitor = PartitionMonitor(admin, self.service.growth, config.job.inputs,
                                        config.coordinator.monitor_interval_ms / 1000, clock)
        self._offsets = Deadline(clock)
        self._decide, self._views = Deadline(clock), Deadline(clock)
        self._news = Deadline(clock)        # news may trigger a decision once expired
        self._news.arm(0)
        self._offsets.arm(0)
        self._decide.arm(0)
        self._views.arm(0)
        self._keepalive_s = keepalive_s
        self._keeper_stop = threading.Event()
        self._keeper = threading.Thread(target=self._keep, name="leader-keepalive",
                                        daemon=True)
        self._keeper.start()

    def _keep(self) -> None:
        """Write the "leader" record every `keepalive_s` until stopped or fenced (a
        fenced write is recorded in the guarded core, and the next turn raises it)."""
        while not self._keeper_stop.wait(self._keepalive_s):
            try:
                _guard(lambda: self.service.guard.keepalive(self.identity()))
            except FencedError:
                return
            except Exception:  # noqa: BLE001 - the loop owns the daemon; keep the lease
                log.exception("writing the leader record failed (will retry)")

    def _stop_keeper(self) -> None:
        self._keeper_stop.set()
        if self._keeper is not threading.current_thread():
            self._keeper.join(_KEEPER_JOIN_S)

    def _core(self, admin: TopicAdmin, metrics: CoordinatorMetrics) -> Coordinator:
        """Fence, read the stream, rebuild; on a fresh job group the inputs."""
        core_config = CoreConfig.from_config(self.config)
        records = self.stream.open()
        core = Coordinator.restore(core_config, self.clock, records, metrics)
        if core is not None:
            log.info("resumed job %s at generation %d: %d processor(s), %d handoff(s) in "
                     "flight", self.config.job.name, core.picture.model.generation,
                     len(list(core.picture.processors)), len(core.picture.handoffs))
            return core
        counts = admin.partition_counts(self.config.job.inputs)
        model = JobModel.first([(t, counts[t]) for t in self.config.job.inputs],
                               self.config.job.grouping)
        log.info("new job %s: %d task(s) from %s (%s grouping)", self.config.job.name,
                 len(model.tasks), counts, self.config.job.grouping)
        return Coordinator(core_config, self.clock, model, metrics)

    def turn(self) -> None:
        """One loop turn.

        Raises:
            FencedError: another coordinator took over: this one must step down.
        """
        news = self.service.guard.wake.is_set() and self._news.expired()
        if news or self._decide.expired():
            self.service.guard.wake.clear()
            took = paced(self._decide, _DECIDE_S, _DECIDE_SPACING, self.service.decisions.tick)
            self._news.arm(_NEWS_SPACING * took)
        if self._views.expired():
            paced(self._views, _VIEWS_S, _REFRESH_SPACING, self.service.views.refresh)
        if self._offsets.expired():
            paced(self._offsets, _OFFSETS_S, _REFRESH_SPACING, self.service.growth.refresh_offsets)
        _guard(self.monitor.poll_if_due)
        _guard(lambda: self.service.growth.settle_barriers(self.stream.write_markers))
        fenced = self.service.guard.fenced
        if fenced is not None:
            raise FencedError(*fenced.args)     # a new one each time (daemon/stream_writer.py)

    def wait(self, seconds: float) -> None:
        """Sleep until the next turn, waking early when a heartbeat wants a decision or
        an HTTP write was fenced (news that came too soon after a decision waits out
        its spacing)."""
        if self.service.guard.wake.is_set():
            self.clock.sleep(min(seconds, self._news.remaining()))
            return
        self.service.guard.wake.wait(seconds)

    def resign(self) -> None:
        """A clean stop: tell standbys to take over now instead of after the silence."""
        self._stop_keeper()
        _guard(lambda: self.service.guard.keepalive(None))

    def identity(self) -> dict[str, Any]:
        return {"url": self.url, "pid": os.getpid(), "host": socket.gethostname(),
                "listen": self.config.coordinator.listen, "at": self.clock.time()}

    def close(self) -> None:
        self._stop_keeper()
        self.stream.close()


class ChangelogTopicError(ValueError):
    """The changelog topic does not fit the mapping (not compacted, too few
    partitions): a configuration problem, the message names the topic."""


def _changelog(config: Config, admin: TopicAdmin, core: Coordinator) -> None:
    """Give every task a changelog partition and make the topic fit the mapping.

    Raises:
        ChangelogTopicError: the topic is not compacted or lacks partitions.
        TopicsError: the broker refused to describe, create or grow it.
    """
    topic = changelog_topic(config.job.name)
    model = core.picture.model.with_changelog()
    shape = admin.describe(topic, ["cleanup.policy"])
    plan = plan_changelog_topic(topic, None if shape is None else shape.partitions,
                                None if shape is None else shape.config.get("cleanup.policy"),
                                model.changelog, core.picture.model.changelog_written())
    if plan.problem is not None:
        raise ChangelogTopicError(f"{plan.problem} (catch_up.source = \"changelog\" in "
                                  f"{config.path})")
    if plan.create:
        admin.ensure_topic(topic, plan.create, {"cleanup.policy": "compact"},
                           what="the changelog")
    if plan.grow_to:
        admin.create_partitions(topic, plan.grow_to)
    if model is not core.picture.model:
        core.adopt_model(model)
        log.info("changelog %s: task -> partition %s (generation %d)", topic,
                 model.changelog, model.generation)


def _guard(step: Callable[[], Any]) -> None:
    """Run one step; transient I/O trouble is logged and retried next time."""
    try:
        step()
    except FencedError:
        raise
    except (StreamError, TopicsError, KafkaException) as exc:
        log.warning("%s failed (will retry): %s", getattr(step, "__name__", "step"), exc)


def paced(deadline: Deadline, floor_s: float, spacing: float, work: Callable[[], None]) -> float:
    """Run `work` (guarded); re-arm `deadline` for `floor_s`, or `spacing` times what the
    work took when longer. Returns the seconds it took.

    What it took is this thread's CPU time: the spacing bounds the loop's share of a
    core, and waiting on the broker costs none. (Wall time counted a decision's wait
    on the stream's transaction, and `spacing` times that delayed the next decision,
    so a reported release waited for its activation: docs/performance.md,
    "Measurements behind the code".)"""
    started = time.thread_time()
    _guard(work)
    took = time.thread_time() - started
    deadline.arm(max(floor_s, spacing * took))
    return took
