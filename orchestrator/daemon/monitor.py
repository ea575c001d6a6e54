"""The partition monitor: polls the inputs' partition counts and reports growth.

Owned by the daemon's main loop (it never runs on its own thread): `poll_if_due()` is
cheap when the interval has not passed. A count that changed goes to input growth,
which applies the fixed-task expansion or refuses it with an error naming the topic
and both counts (kept in /status until a later poll sees an acceptable count).
Admin errors are logged and retried at the next interval: the job keeps running on
the model it has.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from confluent_kafka import KafkaException

from orchestrator.daemon.growth import Admin, InputGrowth
from orchestrator.kafka.topics import TopicsError
from orchestrator.wire.clock import Clock, Deadline

__all__ = ["PartitionMonitor"]

log = logging.getLogger("baton.coordinator.monitor")

# a poll waits at least this many times what the last one took
_SPACING = 100.0


class PartitionMonitor:
    """Polls `inputs` every `interval_s` seconds on `clock` (less often when one poll
    costs more than a hundredth of that)."""

    def __init__(self, admin: Admin, growth: InputGrowth, inputs: Sequence[str],
                 interval_s: float, clock: Clock) -> None:
        self._admin = admin
        self._growth = growth
        self._inputs = list(inputs)
        self._interval_s = interval_s
        self._clock = clock
        self._due = Deadline(clock)
        self._due.arm(0)

    def poll_if_due(self) -> bool:
        """Poll once if the interval has passed; returns whether it polled."""
        if not self._due.expired():
            return False
        started = self._clock.monotonic()
        try:
            counts = self._admin.partition_counts(self._inputs)
        except (TopicsError, KafkaException) as exc:
            self._due.arm(self._interval_s)
            log.warning("partition monitor: cannot read partition counts of %s: %s; "
                        "retrying in %.1f s", ", ".join(self._inputs), exc, self._interval_s)
            return True
        # a large job's metadata holds the GIL long enough to stall every heartbeat in
        # flight: such a job is polled less often than `interval_s`
        self._due.arm(max(self._interval_s, _SPACING * (self._clock.monotonic() - started)))
        self._growth.sync_partitions(counts)
        return True
