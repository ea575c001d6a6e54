"""bench/vs_kafka_streams.py's cheap parts: its arguments, the pinned --json shape, and
the pure helpers that read the Kafka Streams peer's reports and the output's gaps. The
benchmark itself is a script and does not run here."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from processor.oracle import OracleResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import vs_common  # noqa: E402 - the bench's modules import each other from bench/
import vs_kafka_streams  # noqa: E402
import vs_streams  # noqa: E402


def test_arguments() -> None:
    args = vs_kafka_streams.parse_args(["--keys", "10000", "--json"])
    assert args.keys == [10_000] and args.json and args.systems == ["baton", "fastest",
                                                                     "default"]
    assert vs_kafka_streams.parse_args([]).keys == [100_000, 1_000_000]
    with pytest.raises(SystemExit):
        vs_kafka_streams.parse_args(["--keys", "0"])
    with pytest.raises(SystemExit):
        vs_kafka_streams.parse_args(["--systems", "flink"])
    assert vs_kafka_streams.parse_args([]).broker == "kafka"
    assert vs_kafka_streams.parse_args(["--broker", "kafka3"]).broker == "kafka3"
    with pytest.raises(SystemExit):
        vs_kafka_streams.parse_args(["--broker", "embedded"])


def _phase(**more: Any) -> dict[str, Any]:
    return {"oracle": OracleResult(10, 10, 1, 2, 0, 5, ["key b'k': ..."]), **more}


def test_json_is_the_pinned_shape() -> None:
    scale = _phase(balanced_s=61.5, gaps_ms={2: 80.0, 5: 120.0}, moved=[2, 5], rebuilt=4000,
                   rebuilt_s=2.0, cpu_s={"new": 1.0, "old": 2.0})
    rows = [vs_kafka_streams.row(100_000, "fastest", scale, _phase(failover_s=46)),
            vs_kafka_streams.row(100_000, "baton", scale, _phase(failover_s=10.6))]
    runs = json.loads(vs_kafka_streams.to_json(rows))["runs"]
    assert list(runs[0]) == ["keys", "system", "settings", "balanced_s", "pause_ms_p99",
                             "failover_s", "lost", "duplicated", "wrong"]
    assert runs[0]["system"] == "kafka_streams" and runs[1]["system"] == "baton"
    assert runs[1]["settings"] == "baton"
    assert runs[0]["pause_ms_p99"] == 120.0 and isinstance(runs[0]["failover_s"], float)
    assert (runs[0]["lost"], runs[0]["duplicated"], runs[0]["wrong"]) == (2, 4, 0)
    assert rows[0]["rebuilt_per_s"] == 2000


def test_peer_report_lines() -> None:
    line = vs_streams.parse_line("peer 1700000000123 state=RUNNING active=0_1,0_7 "
                                 "standby=0_3 rebuilt=42 standby_lag=5\n")
    assert line == {"ms": 1700000000123, "state": "RUNNING", "active": {1, 7},
                    "standby": {3}, "rebuilt": 42, "standby_lag": 5}
    assert vs_streams.parse_line("peer 1700000000123 state=NOT_RUNNING")["active"] == set()
    assert vs_streams.parse_line("[main] INFO something") is None


def _peer(*lines: str) -> vs_streams.Peer:
    peer = vs_streams.Peer("i", proc=None)  # type: ignore[arg-type]
    peer.lines = [p for p in map(vs_streams.parse_line, lines) if p is not None]
    return peer


def test_balanced_only_once_warmups_are_promoted() -> None:
    old = _peer("peer 1000 state=RUNNING active=0_0,0_1,0_2 standby=")
    other = _peer("peer 1000 state=RUNNING active=0_3,0_4,0_5 standby=")
    new = _peer("peer 2000 state=RUNNING active=0_6 standby=0_7")
    assert vs_streams.balanced_at([old, other, new], new) is None       # a warmup left
    new.lines += [vs_streams.parse_line("peer 3000 state=RUNNING active=0_6,0_7 standby="),
                  vs_streams.parse_line("peer 4000 state=RUNNING active=0_6,0_7 standby= "
                                        "rebuilt=5")]
    assert vs_streams.balanced_at([old, other, new], new) == 3.0      # not the counter's
    idle = _peer("peer 500 state=RUNNING active= standby=")
    everything = _peer("peer 900 state=RUNNING active=0_0,0_1,0_2,0_3,0_4,0_5,0_6,0_7")
    assert vs_streams.balanced_at([everything, idle], idle) is None     # nothing moved yet


def _message(key: bytes, at_ms: int) -> Any:
    return SimpleNamespace(key=lambda: key, timestamp=lambda: (1, at_ms))


def test_gaps_of_moved_partitions_only() -> None:
    key = next(f"key-{i}".encode() for i in range(100)
               if vs_common.partition_of(f"key-{i}".encode()) == 3)
    outputs = [_message(key, ms) for ms in (10_000, 10_010, 10_400, 10_420, 20_000)]
    gaps = vs_common.moved_gaps_ms(outputs, {3, 4}, 10.0, 11.0)
    assert gaps[3] == 390.0
    assert gaps[4] == 1000.0            # no output at all in the window: all of it
    assert vs_common.percentile([5.0, 1.0, 3.0], 99) == 5.0
    assert vs_common.percentile([], 99) == 0.0


def test_rebuilt_counts_until_the_warmups_caught_up() -> None:
    new = _peer("peer 1000 state=RUNNING active= standby=0_6 rebuilt=0 standby_lag=0",
                "peer 2000 state=RUNNING active= standby=0_6 rebuilt=800 standby_lag=300",
                "peer 3000 state=RUNNING active= standby=0_6 rebuilt=1100 standby_lag=0",
                "peer 9000 state=RUNNING active=0_6 standby= rebuilt=1500 standby_lag=0")
    assert vs_streams.rebuilt_until(new, 9.0) == (1100, 3.0)
    assert vs_streams.owners([new]) == {6: "i"}


def test_building_the_peer_without_maven_says_how_to_get_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a jar that is not there, and a PATH without mvn: the peer must be built and cannot be
    monkeypatch.setattr(vs_streams, "_JAR", tmp_path / "missing.jar")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"`mvn` is not on PATH.*\./run bench"):
        vs_streams.ensure_peer(lambda _text: None)
