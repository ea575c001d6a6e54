"""`baton dev`'s records: JSON lines in (what to produce to the job's input), JSON lines
out (what the job committed to its output topics).

An input line is a JSON object::

    {"key": "user-1", "value": {"n": 2}, "headers": {"src": "web"}}

- ``key``, ``value``: a string is sent as its UTF-8 bytes, null as null (no key; a
  value of null is a tombstone), anything else (an object, array, number, boolean) as
  its JSON text, so a job with ``value_format = "json"`` reads it back as given;
  ``{"hex": "ff00"}`` (the object's only key) sends raw bytes.
- ``headers`` (optional): an object ``{"name": "value"}`` or a list of
  ``["name", "value"]`` pairs (names may repeat), values as for ``value``.
- ``topic`` (optional): one of the job's inputs (default: the first);
  ``partition`` (optional): else the job's partitioner picks it from the key.
- ``timestamp`` (optional): the record's time, ms since the epoch (default: when it is
  produced), so that a job's stream time (TTLs, timers, windows) follows the file's.

An output line shows a committed record of an output topic: ``topic``, ``partition``,
``offset``, ``timestamp``, ``key`` and ``value`` (UTF-8 text, or ``{"hex": ...}`` for
bytes that are not), and ``headers`` when it has any.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Message

__all__ = ["InputError", "InputRecord", "output_line", "parse_line"]

_FIELDS = {"key", "value", "headers", "topic", "partition", "timestamp"}


class InputError(ValueError):
    """A line that is not a record (the caller names the file and the line number)."""


@dataclass(frozen=True)
class InputRecord:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    topic: str
    partition: int | None
    timestamp: int | None = None


def _bytes(value: Any, what: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict) and set(value) == {"hex"} and isinstance(value["hex"], str):
        try:
            return bytes.fromhex(value["hex"])
        except ValueError:
            raise InputError(f"{what}: {value['hex']!r} is not hex") from None
    return json.dumps(value, separators=(",", ":")).encode()


def _headers(headers: Any) -> list[tuple[str, bytes | None]]:
    if headers is None:
        return []
    pairs = headers.items() if isinstance(headers, dict) else headers
    try:
        return [(str(name), _bytes(value, f"header {name!r}")) for name, value in pairs]
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError('"headers" must be an object or a list of [name, value] pairs'
                         ) from None


def parse_line(line: str, inputs: list[str]) -> InputRecord | None:
    """The record of one input line (None for a blank line).

    Raises:
        InputError: not a JSON object of the fields above, or an unknown topic.
    """
    if not line.strip():
        return None
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise InputError('expected a JSON object such as {"key": "k", "value": "v"}')
    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        raise InputError(f"unknown field(s) {unknown}; use {sorted(_FIELDS)}")
    topic = raw.get("topic", inputs[0])
    if topic not in inputs:
        raise InputError(f"topic {topic!r} is not one of the job's inputs {inputs}")
    partition = raw.get("partition")
    if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)
                                  or partition < 0):
        raise InputError(f'"partition" must be an int >= 0, got {partition!r}')
    timestamp = raw.get("timestamp")
    if timestamp is not None and (isinstance(timestamp, bool) or not isinstance(timestamp, int)
                                  or timestamp < 0):
        raise InputError(f'"timestamp" must be an int >= 0 (ms since the epoch), got '
                         f'{timestamp!r}')
    return InputRecord(_bytes(raw.get("key"), '"key"'), _bytes(raw.get("value"), '"value"'),
                       _headers(raw.get("headers")), topic, partition, timestamp)


def _shown(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": raw.hex()}


def output_line(msg: Message) -> str:
    """One committed output record as a JSON line."""
    shown: dict[str, Any] = {"topic": msg.topic(), "partition": msg.partition(),
                             "offset": msg.offset(), "timestamp": msg.timestamp()[1],
                             "key": _shown(msg.key()), "value": _shown(msg.value())}
    if msg.headers():
        shown["headers"] = [[name, _shown(value)] for name, value in msg.headers()]
    return json.dumps(shown, ensure_ascii=False)
