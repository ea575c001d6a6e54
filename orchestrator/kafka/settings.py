"""Which [kafka] settings each kind of librdkafka client takes.

[kafka] is passed to every client as is (docs/configuration.md, "[kafka]"). A
consumer-only property given to a producer or an admin client is ignored, with a
CONFWARN line for each client created (one per active task); `producer_settings` leaves
them out. The list holds the consumer-only properties a Baton config may carry
(librdkafka's CONFIGURATION.md marks them "C"), not every one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CONSUMER_ONLY_PREFIXES", "producer_settings"]

CONSUMER_ONLY_PREFIXES = (
    "fetch.", "queued.", "group.", "isolation.level", "enable.auto.", "auto.commit.",
    "auto.offset.reset", "enable.partition.eof", "check.crcs", "session.timeout.ms",
    "heartbeat.interval.ms", "max.poll.interval.ms", "partition.assignment.strategy",
)


def producer_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """`settings` without the consumer-only properties: what a producer or an admin
    client is given."""
    return {k: v for k, v in settings.items() if not k.startswith(CONSUMER_ONLY_PREFIXES)}
