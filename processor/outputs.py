"""What a job yields, as the producer takes it: `(key, value)` pairs and `Output`s.

The active task produces pairs on its own hot path (processor/active.py); an `Output`
comes here, to be checked (its topic must be one the job declares: a typo would
otherwise create a topic, or fail the transaction) and encoded. The audit and
processor.testing read outputs through the same function, so all three agree on what
a job's output is.
"""

from __future__ import annotations

from collections.abc import Collection

from processor.job import Output

__all__ = ["OutputError", "output_fields", "encode_output"]

# (topic, key, value, headers, timestamp or None for the input's)
Fields = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None,
               int | None]


class OutputError(ValueError):
    """process() yielded something that is neither a `(key, value)` pair nor an
    `Output`, or an `Output` to a topic the job does not declare."""


def encode_output(value: bytes | str | None) -> bytes | None:
    """bytes as they are, str as UTF-8, None as None (a null key or a tombstone)."""
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def output_fields(out: object, default_topic: str, topics: Collection[str]) -> Fields:
    """The producer's fields for one yielded output.

    Args:
        out: a `(key, value)` pair or an `Output`.
        default_topic: the job's `output`, where pairs and topic-less Outputs go.
        topics: every topic an Output may name.

    Raises:
        OutputError: `out` is neither, or names an undeclared topic.
    """
    if isinstance(out, Output):
        topic = default_topic if out.topic is None else out.topic
        if topic not in topics:
            raise OutputError(f"process() yielded an Output to topic {topic!r}, which the "
                              f"job does not declare (its outputs: {sorted(topics)}); "
                              f"name it in [job] outputs")
        headers = None if not out.headers else [
            (str(name), encode_output(value)) for name, value in out.headers]
        return (topic, encode_output(out.key), encode_output(out.value), headers,
                out.timestamp)
    if isinstance(out, tuple | list) and len(out) == 2:    # a pair (a list unpacks too)
        return default_topic, encode_output(out[0]), encode_output(out[1]), None, None
    raise OutputError(f"process() yielded {out!r}: yield (key, value) pairs or "
                      f"processor.Output(key, value, ...)")
