"""Checks of what a handoff record or event carries, with errors that name the field
and the likely cause (a stream written by another version, a foreign writer)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from orchestrator.core.handoff.errors import LocalHandoffError
from orchestrator.wire.partitions import PartitionNameError, parse_partition

__all__ = ["bad_record", "check_offsets", "record_field"]


def check_offsets(offsets: object, fail: Callable[[str], Exception]) -> None:
    """Final offsets are {"topic:N": offset >= 0}; anything else is rejected by name."""
    if not isinstance(offsets, dict):
        raise fail(f"expected a mapping of 'topic:N' to offsets, got {offsets!r}")
    for partition, offset in offsets.items():
        try:
            parse_partition(partition)
        except PartitionNameError:
            raise fail(f"partition {partition!r} is not written 'topic:N'") from None
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise fail(f"offset {offset!r} of {partition} is not an offset >= 0")


def bad_record(record: Mapping[str, Any], key: str, want: str) -> LocalHandoffError:
    return LocalHandoffError(
        f"persisted handoff of task {record.get('task')!r}: field {key!r} is "
        f"{record.get(key)!r}, expected {want}. Likely cause: a coordinator stream "
        "written by another Baton version, or a foreign writer on the topic")


_MISSING: Final = object()


def record_field(record: Mapping[str, Any], key: str,
                 kind: type[Any] | tuple[type[Any], ...], default: object = _MISSING) -> Any:
    """One typed field of a persisted record (a bool never passes for a number)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if key not in record:
        if default is _MISSING:
            raise bad_record(record, key, "a value (the field is missing)")
        return default
    value = record[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise bad_record(record, key, " or ".join(k.__name__ for k in kinds))
    return value
