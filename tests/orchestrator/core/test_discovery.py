"""Prometheus service discovery (orchestrator/core/discovery.py) on plain data: the
leader's picture and the stream records a standby follows give the same answer."""

from __future__ import annotations

from orchestrator.core.discovery import sd_from_records, sd_targets
from orchestrator.core.liveness import Processor


def _processors() -> list[Processor]:
    return [Processor("p2", "b", "http://10.0.0.2:9102/metrics"),
            Processor("p1", "a", "http://10.0.0.1:9101/metrics"),
            Processor("p3", "c", "http://10.0.0.3:9103/metrics", valid=False),
            Processor("p4", "d", None),
            Processor("p5", "e", "https://10.0.0.5:9105/baton")]


def test_one_group_per_live_processor_with_a_metrics_url_by_id() -> None:
    assert sd_targets(_processors(), "sums") == [
        {"targets": ["10.0.0.1:9101"], "labels": {"job": "sums", "processor": "p1"}},
        {"targets": ["10.0.0.2:9102"], "labels": {"job": "sums", "processor": "p2"}},
        {"targets": ["10.0.0.5:9105"], "labels": {
            "job": "sums", "processor": "p5", "__metrics_path__": "/baton",
            "__scheme__": "https"}},
    ]


def test_the_stream_records_give_the_leader_s_answer() -> None:
    records = {f"processor/{p.id}": p.to_record() for p in _processors()}
    records.update({"model": {"generation": 3}, "leader": {"url": "http://c:8700"},
                    "assignment": {"p1": {"active": ["Partition 0"]}}})
    assert sd_from_records(records, "sums") == sd_targets(_processors(), "sums")


def test_a_forgotten_or_deleted_processor_is_not_listed() -> None:
    records = {"processor/p1": Processor("p1", "a", "http://h:1/metrics").to_record(),
               "forgotten": {"p9": "z"}}
    assert [g["labels"]["processor"] for g in sd_from_records(records, "j")] == ["p1"]
    assert sd_from_records({}, "j") == []
