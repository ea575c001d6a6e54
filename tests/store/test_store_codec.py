"""Key, value and offset encodings, and task store paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import decode_key, decode_value, encode_key, encode_value, task_store_path
from store.codec import META_PREFIX, encode_offsets
from store.paths import safe_dir_name


@pytest.mark.parametrize("key", [b"a", "a", b"", "", b"\x00\xff", "é/ü", "0"])
def test_keys_round_trip_as_their_own_type(key: bytes | str) -> None:
    decoded = decode_key(encode_key(key))
    assert decoded == key
    assert type(decoded) is type(key)


def test_bytes_and_str_keys_are_distinct_and_never_metadata() -> None:
    assert encode_key(b"a") != encode_key("a")
    assert not encode_key(b"\x00").startswith(META_PREFIX)
    assert not encode_key("").startswith(META_PREFIX)


def test_encoded_order_is_bytes_keys_then_str_keys() -> None:
    keys: list[bytes | str] = ["b", b"b", "a", b"a", b"\xff"]
    assert sorted(keys, key=encode_key) == [b"a", b"b", b"\xff", "a", "b"]


def test_an_int_key_is_refused_with_what_to_do() -> None:
    with pytest.raises(TypeError, match=r"got int: 7; an int key must be made a str"):
        encode_key(7)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", [None, 1, 1.5, ("a",)])
def test_other_key_types_are_refused(key: object) -> None:
    with pytest.raises(TypeError, match="bytes or str"):
        encode_key(key)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [
    0, -1, 2**63 - 1, -(2**63), 2**70, -(2**100), 1.5, -0.25, True, False, None, "",
    "text é", [], [1, "a", None], {}, {"a": {"b": [1, 2.5, {"c": None}]}},
])
def test_json_values_round_trip(value: object) -> None:
    assert decode_value(encode_value(value)) == value


def test_non_json_values_are_refused() -> None:
    with pytest.raises(TypeError):
        encode_value(b"bytes")
    with pytest.raises(TypeError):
        encode_value({1: "non-str key"})


@pytest.mark.parametrize("offsets", [
    {"t": 1}, {"t:x": 1}, {":1": 1}, {"t:1": -1}, {"t:1": 1.0}, {"t:1": True},
])
def test_bad_offsets_are_refused_naming_the_partition(offsets: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="partition|applied offset"):
        encode_offsets(offsets)  # type: ignore[arg-type]


def test_offsets_accept_topics_with_colons() -> None:
    assert encode_offsets({"a:b:3": 7}) == [(META_PREFIX + b"offset:a:b:3", b"7")]


def test_task_store_path_keeps_safe_names() -> None:
    assert task_store_path("state", "sums", "p-0.x_1") == Path("state/sums/p-0.x_1")


def test_task_store_path_sanitises_into_one_directory() -> None:
    path = task_store_path("/s", "my job", "Partition 0")
    assert path.parent.parent == Path("/s")
    assert path.name.startswith("Partition_0+")
    assert path.parent.name.startswith("my_job+")
    for name in ("a/b", "../x", ".", "..", "", "x" * 300, "p\x00q"):
        safe = safe_dir_name(name)
        assert "/" not in safe and "\x00" not in safe and safe not in ("", ".", "..")
        assert len(safe) < 120


def test_task_store_path_is_injective_on_near_collisions() -> None:
    names = ["Partition 0", "Partition_0", "Partition/0", "Partition:0", "a" * 101,
             "a" * 102, ".", "_", ".."]
    assert len({safe_dir_name(n) for n in names}) == len(names)
