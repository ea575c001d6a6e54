"""The expansion barrier rule: markers, the misrouting rule, settlement in the model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from orchestrator.core.grouping import expand, expansion_parents
from orchestrator.core.model import JobModel
from orchestrator.wire.barrier import (
    FORWARDED_HEADER,
    MARKER_HEADER,
    BarrierInfo,
    Marker,
    decode_marker,
    encode_marker,
    input_records,
    reroutes,
    skip_marker,
)
from orchestrator.wire.partitioners import home_partition

PART = "consistent_random"


def key_homed(partition: int, count: int, avoid: set[bytes] = frozenset()) -> bytes:  # type: ignore[assignment]
    """A key the producers' partitioner sends to `partition` among `count`."""
    for i in range(100_000):
        key = f"k{i}".encode()
        if key not in avoid and home_partition(PART, key, count) == partition:
            return key
    raise AssertionError("no key found")


def test_a_marker_round_trips_and_names_its_job() -> None:
    value, headers = encode_marker("sums", "ev:1", ["ev:5"], 8)
    assert headers == [(MARKER_HEADER, b"sums")]
    assert decode_marker("sums", headers, value) == Marker("sums", "ev:1", ("ev:5",), 8)
    assert decode_marker("other", headers, value) is True        # another job's: skip
    assert decode_marker("sums", [(MARKER_HEADER, b"sums")], b"junk") is True
    assert decode_marker("sums", [("x", b"1")], b"{}") is False
    assert decode_marker("sums", None, b"{}") is False


# (offset, key's home among 8, expected target) for parent ev:1, child ev:5 settled at 100
ROWS = [
    (50, 5, None),        # before the barrier: the parent's record, in place
    (100, 5, None),       # the marker's own offset
    (101, 5, "ev:5"),     # past it, a child key: misrouted
    (101, 1, None),       # past it, the parent's own key
    (101, 3, None),       # a key of another lineage (a producer's own choice): kept
]


@pytest.mark.parametrize(("offset", "home", "target"), ROWS)
def test_one_level_rule(offset: int, home: int, target: str | None) -> None:
    rule = reroutes(["ev:1"], {"ev:5": BarrierInfo("ev:1", 100)}, PART, {"ev": 8})["ev:1"]
    assert rule.target(key_homed(home, 8), offset) == target


def test_no_key_and_an_unsettled_barrier_never_reroute() -> None:
    settled = reroutes(["ev:1"], {"ev:5": BarrierInfo("ev:1", 100)}, PART, {"ev": 8})["ev:1"]
    assert settled.target(None, 500) is None
    assert settled.target(b"", 500) is None          # consistent_random: no key either
    assert reroutes(["ev:1"], {"ev:5": BarrierInfo("ev:1", 100, settled=False)}, PART,
                    {"ev": 8}) == {}


def test_two_expansions_forward_one_generation_at_a_time() -> None:
    # 4 -> 8 -> 16: ev:13 is a child of ev:5, itself a child of ev:1
    barriers = {"ev:5": BarrierInfo("ev:1", 100), "ev:9": BarrierInfo("ev:1", 300),
                "ev:13": BarrierInfo("ev:5", 40, settled=False)}
    rules = reroutes(["ev:1", "ev:5"], barriers, PART, {"ev": 16})
    assert set(rules) == {"ev:1"}                        # ev:5's only child is unsettled
    one = rules["ev:1"]
    to13, to9, to5 = key_homed(13, 16), key_homed(9, 16), key_homed(5, 16)
    assert one.target(to13, 200) == "ev:5"               # ev:5 passes it on in its time
    assert one.target(to5, 200) == "ev:5"
    assert one.target(to9, 200) is None                  # ev:9's barrier is at 300
    assert one.target(to9, 301) == "ev:9"


def test_a_settled_grandchild_is_forwarded_from_the_middle() -> None:
    barriers = {"ev:5": BarrierInfo("ev:1", 100), "ev:13": BarrierInfo("ev:5", 40)}
    rule = reroutes(["ev:5"], barriers, PART, {"ev": 16})["ev:5"]
    assert rule.target(key_homed(13, 16), 41) == "ev:13"
    assert rule.target(key_homed(5, 16), 41) is None


def _model(grace_due: float) -> JobModel:
    model = JobModel.first([("ev", 4)], "partition")
    grouping = expand(model.grouping, [("ev", 8)])
    parents = expansion_parents(model.grouping, grouping)
    return model.expanded(grouping, parents, {p: 10 for p in parents.values()},
                          grace_due).model


def test_barriers_wait_for_the_grace_then_settle_at_the_markers() -> None:
    model = _model(1000.0)
    assert set(model.unsettled) == {"ev:4", "ev:5", "ev:6", "ev:7"}
    assert model.due(999.9) == {}
    assert model.waits_for_settlement(["ev:5"]) and not model.waits_for_settlement(["ev:1"])
    due = model.due(1000.0)
    assert due == {"ev:0": ["ev:4"], "ev:1": ["ev:5"], "ev:2": ["ev:6"], "ev:3": ["ev:7"]}
    settled = model.settled({"ev:4": 10, "ev:5": 12, "ev:6": 30, "ev:7": 11})
    assert settled.unsettled == {} and settled.generation == model.generation + 1
    assert settled.barriers["ev:5"] == ("ev:1", 12)
    assert not settled.waits_for_settlement(["ev:5"])
    assert JobModel.from_record(model.to_record()) == model      # persisted, due included
    with pytest.raises(ValueError, match="below the parent's end"):
        model.settled({"ev:5": 9})


@dataclass
class Msg:
    t: str
    p: int
    o: int
    h: list[tuple[str, bytes]] | None = None

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def headers(self) -> Any:
        return self.h


def test_input_records_drop_markers_and_forwarded_originals() -> None:
    original, marker = Msg("ev", 1, 7), Msg("ev", 1, 5, [(MARKER_HEADER, b"sums")])
    copy = Msg("ev", 5, 2, [("app", b"x"), (FORWARDED_HEADER, b"ev:1@7")])
    plain = Msg("ev", 1, 3)
    assert input_records([plain, marker, original, copy]) == [plain, copy]


@dataclass
class Rec:
    h: list[tuple[str, bytes]] | None
    v: bytes | None
    o: int = 9

    def headers(self) -> Any:
        return self.h

    def value(self) -> bytes | None:
        return self.v

    def offset(self) -> int:
        return self.o


def test_skip_marker_reports_only_the_jobs_own() -> None:
    seen: list[tuple[str, int, Marker]] = []
    report = lambda partition, offset, marker: seen.append((partition, offset, marker))  # noqa: E731
    mine, other = encode_marker("sums", "ev:1", ["ev:5"], 8), encode_marker("x", "ev:1", [], 8)
    assert skip_marker("sums", Rec(mine[1], mine[0]), "ev:1", report)
    assert skip_marker("sums", Rec(other[1], other[0]), "ev:1", report)
    assert not skip_marker("sums", Rec(None, b"5"), "ev:1", report)
    assert seen == [("ev:1", 9, Marker("sums", "ev:1", ("ev:5",), 8))]
