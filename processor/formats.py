"""`[job] key_format` / `value_format`: what process() sees of a record's key and value,
and how what it yields is produced.

- ``bytes`` (the default, the pinned behaviour): bytes in; bytes or str (UTF-8) out.
- ``str``: UTF-8 text in (bytes that are not UTF-8 fail the record); str or bytes out.
- ``json``: the parsed JSON document in (a dict, list, str, number, bool or None);
  out, any JSON-able value is serialised, bytes go as they are (already encoded).

A null key or value (a tombstone) is None in every format, in and out. A record that
does not decode fails in process(), so it takes the path of any failing record: the
task's `on_error` on the active path (fail, skip, or the dead-letter topic with the
record's raw bytes), skipped by replays (warmups, standbys, Spark folds), which agrees
with what the active task did. With both formats ``bytes`` the job is not wrapped at
all: the default path costs nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

import orjson

from processor.job import Context, Job, Output, Record, State
from processor.replica import new_record
from processor.timers import Timer

__all__ = ["FORMATS", "Format", "FormatError", "FormattedJob", "with_formats"]

# the same values as orchestrator.wire.job_config.Format (a test keeps them equal)
Format = Literal["bytes", "str", "json"]
FORMATS: tuple[Format, ...] = ("bytes", "str", "json")
_Codec = Callable[[Any], Any]


class FormatError(ValueError):
    """A record's key or value is not in the job's declared format, or an output's
    cannot be encoded in it."""


def _same(value: Any) -> Any:
    return value


def _utf8(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8")


def _parse(raw: bytes | None) -> Any:
    return None if raw is None else orjson.loads(raw)


def _text(value: Any) -> Any:
    """str and bytes out: str as UTF-8, bytes as they are (the producer's rules)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"expected str or bytes, got {type(value).__name__}: {value!r}")


def _serialise(value: Any) -> bytes | None:
    """JSON out; bytes are taken as an already encoded document, None as a tombstone."""
    if value is None or isinstance(value, bytes):
        return value
    try:
        return orjson.dumps(value)
    except TypeError:                   # integers beyond 64 bits: the stdlib's encoder
        return json.dumps(value, allow_nan=False).encode()


_DECODERS: dict[str, _Codec] = {"bytes": _same, "str": _utf8, "json": _parse}
_ENCODERS: dict[str, _Codec] = {"bytes": _same, "str": _text, "json": _serialise}


class FormattedJob(Job):
    """A job seen through its formats: records decoded before process(), outputs
    encoded after it. `setup` was called on the inner job; `close` is passed on."""

    def __init__(self, job: Job, key_format: Format, value_format: Format) -> None:
        self.inner = job
        self.params = job.params
        self.key_format, self.value_format = key_format, value_format
        self._decode_key, self._decode_value = _DECODERS[key_format], _DECODERS[value_format]
        self._encode_key, self._encode_value = _ENCODERS[key_format], _ENCODERS[value_format]

    def setup(self, context: Context) -> None:
        self.inner.setup(context)

    def process(self, record: Record, state: State) -> list[Any]:
        """The inner job's outputs, encoded: a list, so that a record that does not
        decode raises here, where every caller of process() handles a failing record."""
        try:
            key = self._decode_key(record.key)
        except ValueError as exc:       # UnicodeDecodeError and orjson's are ValueErrors
            raise FormatError(f"{_where(record)}: the key is not {self.key_format} "
                              f"([job] key_format): {exc}") from None
        try:
            value = self._decode_value(record.value)
        except ValueError as exc:
            raise FormatError(f"{_where(record)}: the value is not {self.value_format} "
                              f"([job] value_format): {exc}") from None
        decoded = new_record(key, value, record.topic, record.partition, record.offset,
                             record.timestamp, record.headers)
        return self._encoded(self.inner.process(decoded, state), _where(record))

    def on_timer(self, timer: Timer, state: State) -> list[Any]:
        """The inner job's `on_timer` with the timer's key decoded, its outputs encoded
        (a key that does not decode was never a record's: timers keep record keys)."""
        seen = Timer(self._decode_key(timer.key), timer.time, timer.name, timer.wall)
        return self._encoded(self.inner.on_timer(seen, state), f"the timer at {timer.time}")

    def _encoded(self, outputs: Any, where: str) -> list[Any]:
        outputs = outputs or ()
        if outputs.__class__ is not list:   # a generator: run it before encoding, so
            outputs = list(outputs)         # what it raises is not taken for ours
        encode_key, encode_value = self._encode_key, self._encode_value
        try:
            return [(encode_key(out[0]), encode_value(out[1])) if out.__class__ is tuple
                    and len(out) == 2 else self._encode(out) for out in outputs]
        except TypeError as exc:
            raise FormatError(f"{where}: an output cannot be encoded "
                              f"([job] key_format {self.key_format}, value_format "
                              f"{self.value_format}): {exc}") from None

    def _encode(self, out: object) -> Any:
        """An output that is not a pair tuple, encoded; a shape the producer refuses
        passes unchanged, to be refused there (processor/outputs.py)."""
        if isinstance(out, Output):
            return Output(self._encode_key(out.key), self._encode_value(out.value),
                          out.headers, out.timestamp, out.topic)
        if isinstance(out, list) and len(out) == 2:
            return self._encode_key(out[0]), self._encode_value(out[1])
        return out

    def close(self) -> None:
        self.inner.close()


def _where(record: Record) -> str:
    return f"{record.topic}:{record.partition} offset {record.offset}"


def with_formats(job: Job, key_format: Format = "bytes", value_format: Format = "bytes"
                 ) -> Job:
    """`job` itself when both formats are bytes, else a `FormattedJob` around it."""
    if key_format == "bytes" and value_format == "bytes":
        return job
    return FormattedJob(job, key_format, value_format)
