"""Partition names: ``"topic:N"``, the one spelling of a partition everywhere in Baton.

Both daemons, the coordinator stream and the CLI's JSON use it, so it is part of the
wire contract. Hot paths that only split names they built themselves use
`split_partition` (no validation); anything read from outside goes through
`parse_partition`, which accepts only the canonical spelling.
"""

from __future__ import annotations

import re

__all__ = ["PartitionNameError", "TOPIC_NAME", "format_partition", "parse_partition",
           "split_partition"]

# Kafka's legal topic names: ASCII letters, digits, '.', '_', '-', at most 249 characters.
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


class PartitionNameError(ValueError):
    """A string that is not a canonical ``"topic:N"``; the message quotes it."""


def format_partition(topic: str, partition: int) -> str:
    """``"topic:N"``."""
    return f"{topic}:{partition}"


def parse_partition(text: object) -> tuple[str, int]:
    """Split ``"topic:N"``; only the canonical spelling (no sign, no leading zero) passes.

    Raises:
        PartitionNameError: ``text`` is not a partition name.
    """
    if not isinstance(text, str):
        raise PartitionNameError(f"{text!r} is not a partition: expected 'topic:N' with N >= 0")
    topic, _, number = text.rpartition(":")
    if (not TOPIC_NAME.fullmatch(topic) or not number.isascii() or not number.isdigit()
            or format_partition(topic, int(number)) != text):
        raise PartitionNameError(f"{text!r} is not a partition: expected 'topic:N' with N >= 0")
    return topic, int(number)


def split_partition(name: str) -> tuple[str, int]:
    """Split a name Baton formatted itself (trusted input, per-record paths)."""
    topic, _, number = name.rpartition(":")
    return topic, int(number)
