"""`baton dev`'s JSON lines: what an input line produces, what a bad one says."""

from __future__ import annotations

import re

import pytest

from orchestrator.devkit.records import InputError, InputRecord, parse_line

_INPUTS = ["events", "clicks"]


def test_strings_nulls_json_and_hex() -> None:
    assert parse_line('{"key": "k", "value": {"n": 1}, "headers": {"src": "web"}}',
                      _INPUTS) == InputRecord(b"k", b'{"n":1}', [("src", b"web")],
                                              "events", None)
    assert parse_line('{"key": null, "value": null}', _INPUTS) == InputRecord(
        None, None, [], "events", None)
    assert parse_line('{"value": {"hex": "00ff"}, "topic": "clicks", "partition": 2, '
                      '"headers": [["h", "1"], ["h", null]]}', _INPUTS) == InputRecord(
        None, b"\x00\xff", [("h", b"1"), ("h", None)], "clicks", 2)
    assert parse_line('{"key": 7, "value": [1, "a"]}', _INPUTS) == InputRecord(
        b"7", b'[1,"a"]', [], "events", None)
    assert parse_line('{"key": "u1", "value": "home", "timestamp": 1700000000000}',
                      _INPUTS) == InputRecord(b"u1", b"home", [], "events", None,
                                              1_700_000_000_000)
    assert parse_line("   \n", _INPUTS) is None


@pytest.mark.parametrize(("line", "says"), [
    ("not json", "not JSON"),
    ('["k", "v"]', "expected a JSON object"),
    ('{"key": "k", "val": "v"}', "unknown field(s) ['val']"),
    ('{"value": "v", "topic": "other"}', "'other' is not one of the job's inputs"),
    ('{"value": "v", "partition": -1}', '"partition" must be an int >= 0'),
    ('{"value": {"hex": "zz"}}', "is not hex"),
    ('{"value": "v", "timestamp": "now"}', '"timestamp" must be an int >= 0'),
    ('{"value": "v", "timestamp": -5}', '"timestamp" must be an int >= 0'),
    ('{"value": "v", "headers": 3}', '"headers" must be an object or a list'),
])
def test_a_bad_line_says_what_is_wrong(line: str, says: str) -> None:
    with pytest.raises(InputError, match=re.escape(says)):
        parse_line(line, _INPUTS)
