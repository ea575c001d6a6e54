"""Prometheus HTTP service discovery (the pinned `GET /sd`): one target group per live
processor, from the leader's picture or from the coordinator-stream records a standby
follows (pure functions over plain data).

Both sources give the same answer: a processor's metrics URL and whether its execution
is valid are persisted with every change ("processor/<id>" records), before any
processor hears of it. A standby answers from the stream so that a Prometheus pointed at
any coordinator (the one that led when its scrape config was written, since deposed)
keeps following scale-out and in, and keeps its targets while no coordinator leads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from orchestrator.core.liveness import Processor

__all__ = ["sd_from_records", "sd_targets"]

_PROCESSOR = "processor/"


def sd_targets(processors: Iterable[Processor], job: str) -> list[dict[str, Any]]:
    """The `/sd` answer: `{"targets": ["host:port"], "labels": {"job", "processor"}}` per
    valid processor that reported a metrics URL, by id (a `__metrics_path__` label only
    when its path is not Prometheus' default, `__scheme__` for https).

    Args:
        processors: the known processors (invalid ones are left out).
        job: the job name, the `job` label.
    """
    groups: list[dict[str, Any]] = []
    for processor in sorted(processors, key=lambda p: p.id):
        url = urlsplit(processor.metrics_url or "")
        if not processor.valid or not url.netloc:
            continue
        labels = {"job": job, "processor": processor.id}
        if url.path not in ("", "/metrics"):
            labels["__metrics_path__"] = url.path
        if url.scheme == "https":
            labels["__scheme__"] = "https"
        groups.append({"targets": [url.netloc], "labels": labels})
    return groups


def sd_from_records(records: Mapping[str, Any], job: str) -> list[dict[str, Any]]:
    """The `/sd` answer from coordinator-stream records (key -> JSON value), as a
    standby holds them.

    Args:
        records: the stream's last value per key.
        job: the job name, the `job` label.
    """
    processors = [Processor.from_record(key[len(_PROCESSOR):], value, 0.0)
                  for key, value in records.items()
                  if key.startswith(_PROCESSOR) and isinstance(value, dict)
                  and "execution_id" in value]
    return sd_targets(processors, job)
