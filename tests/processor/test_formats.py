"""`[job] key_format` / `value_format`: records decoded before process(), outputs encoded
after it; a record that does not decode fails like a process() that raised."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, get_args

import pytest

from orchestrator.wire.job_config import Format as ConfigFormat
from processor import Emitted, Job, Output, Record, State
from processor.formats import FORMATS, FormatError, FormattedJob, with_formats
from processor.jobspec import JobSpec
from processor.testing import run_job


class Totals(Job):
    """Sums the JSON values' "n" per str key; yields the running total as JSON."""

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        assert isinstance(record.key, str)
        total = state.get(record.key, 0) + record.value["n"]
        state[record.key] = total
        yield record.key, {"key": record.key, "total": total}
        yield Output(record.key, None, topic="tombstones")


class Echo(Job):
    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        yield record.key, record.value


def test_the_formats_are_the_configs() -> None:
    assert FORMATS == get_args(ConfigFormat)


def test_json_values_and_str_keys_in_and_out() -> None:
    run = run_job(Totals, [("a", '{"n": 2}'), ("b", '{"n": 1}'), ("a", '{"n": 5}')],
                  key_format="str", value_format="json", outputs=["tombstones"])
    pairs = [(o.topic, o.key, o.value) for o in run.outputs]
    assert pairs[0::2] == [("output", b"a", b'{"key":"a","total":2}'),
                           ("output", b"b", b'{"key":"b","total":1}'),
                           ("output", b"a", b'{"key":"a","total":7}')]
    assert pairs[1::2] == [("tombstones", b"a", None), ("tombstones", b"b", None),
                           ("tombstones", b"a", None)]
    assert run.state == {"a": 7, "b": 1}


def test_the_default_formats_do_not_wrap_the_job() -> None:
    job = Echo()
    assert with_formats(job) is job
    assert isinstance(with_formats(job, "str"), FormattedJob)
    run = run_job(Echo, [(b"\xff", b"\xfe")])
    assert [(o.key, o.value) for o in run.outputs] == [(b"\xff", b"\xfe")]


@pytest.mark.parametrize(("key_format", "value_format", "pair", "named"), [
    ("str", "bytes", (b"\xff", b"1"), "the key is not str"),
    ("bytes", "json", (b"k", b"{not json"), "the value is not json"),
    ("bytes", "str", (b"k", b"\xc3"), "the value is not str")])
def test_a_record_that_does_not_decode_goes_through_on_error(
        key_format: Any, value_format: Any, pair: tuple[bytes, bytes], named: str) -> None:
    good = (b"k", b'"ok"')
    run = run_job(Echo, [good, pair, good], key_format=key_format,
                  value_format=value_format, on_error="skip")
    assert len(run.outputs) == 2
    [(record, exc)] = run.failed
    assert isinstance(exc, FormatError)
    assert named in str(exc) and "input:0 offset 1" in str(exc)
    assert record.key == pair[0]                    # the raw record, for a dead letter
    with pytest.raises(FormatError, match=named):
        run_job(Echo, [pair], key_format=key_format, value_format=value_format)


def test_nulls_stay_null_in_every_format() -> None:
    for fmt in FORMATS:
        run = run_job(Echo, [(None, None)], key_format=fmt, value_format=fmt)
        assert [(o.key, o.value) for o in run.outputs] == [(None, None)]


def test_str_outputs_take_bytes_and_refuse_other_types() -> None:
    class Mixed(Job):
        def process(self, record: Record, state: State) -> Iterator[Emitted]:
            yield b"raw", "text"
            yield "k", 3

    with pytest.raises(FormatError, match="cannot be encoded.*int"):
        run_job(Mixed, [("k", "v")], key_format="str", value_format="str")


def test_json_outputs_keep_bytes_and_big_integers() -> None:
    class Big(Job):
        def process(self, record: Record, state: State) -> Iterator[Emitted]:
            yield "k", 2 ** 70
            yield b'"pre"', b'{"a":1}'

    run = run_job(Big, [('"k"', "1")], key_format="json", value_format="json")
    assert [(o.key, o.value) for o in run.outputs] == [
        (b'"k"', str(2 ** 70).encode()), (b'"pre"', b'{"a":1}')]


def test_a_job_spec_makes_the_formatted_job() -> None:
    spec = JobSpec("tests.processor.test_formats:Echo", key_format="str", value_format="json")
    job = spec.make(["input:0"])
    assert isinstance(job, FormattedJob)
    record = Record(b"k", b'[1, 2]', "input", 0, 0, 1)
    assert list(job.process(record, {})) == [(b"k", b"[1,2]")]


def test_an_error_of_the_job_itself_is_not_taken_for_a_format_error() -> None:
    class Broken(Job):
        def process(self, record: Record, state: State) -> Iterator[Emitted]:
            yield record.key, record.value + 1     # str + int: the job's own TypeError

    with pytest.raises(TypeError, match="can only concatenate str") as raised:
        run_job(Broken, [("k", "v")], key_format="str", value_format="str")
    assert not isinstance(raised.value, FormatError)
