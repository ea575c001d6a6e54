"""`/healthz` and `/readyz` on real daemons, as a platform's probes ask them (no
token): a standby stays live, and ready while it knows a leader, through the leader's
death and its own takeover; processors are live and ready once heard; a processor
whose loop is stuck stops being live before it ends itself (exit 3)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from orchestrator.wire.health import LIVE_PATH, READY_PATH
from tests.faults_support import start_standby, with_standby_url
from tests.orchestrator.test_e2e import start_two
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


def probe(base: str, path: str) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(f"{base}{path}", timeout=5)
    return answer.status_code, answer.json()


def processor_base(j: Any, pid: str) -> str:
    url = next(p["metrics_url"] for p in j.status()["processors"] if p["id"] == pid)
    return str(url).removesuffix("/metrics")


class Watch(threading.Thread):
    """Asks one probe every 0.1 s and keeps every answer, until told to stop."""

    def __init__(self, base: str, path: str) -> None:
        super().__init__(daemon=True)
        self.base, self.path = base, path
        self.answers: list[tuple[int, str]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                status, body = probe(self.base, self.path)
                self.answers.append((status, body["detail"]))
            except httpx.HTTPError as exc:
                self.answers.append((0, str(exc)))
            self.done.wait(0.1)

    def stop(self) -> list[tuple[int, str]]:
        self.done.set()
        self.join(30)
        return self.answers


def test_a_standby_stays_live_through_the_leaders_death(job, broker) -> None:
    j = job(coordinator={"takeover_ms": 3000})
    listen = with_standby_url(j)
    feeder = start_two(j, broker)
    standby = start_standby(j, listen)
    leader_base, standby_base = j.config.coordinator.urls
    assert probe(leader_base, LIVE_PATH)[0] == 200
    assert probe(leader_base, READY_PATH) == (200, {"ok": True, "detail": "leading"})
    wait_for(lambda: probe(standby_base, READY_PATH)[0] == 200, 30, "the standby ready")
    assert probe(standby_base, READY_PATH)[1]["detail"] == (f"standby; the leader is at "
                                                            f"{leader_base}")
    for pid in ("p1", "p2"):
        base = processor_base(j, pid)
        assert probe(base, LIVE_PATH) == (200, {"ok": True, "detail": "the main loop turns"})
        wait_for(lambda base=base: probe(base, READY_PATH)[0] == 200, 30, f"{pid} ready")
    # no token asked, and none needed: the probes say nothing secret
    assert httpx.get(f"{standby_base}/status", timeout=5).status_code in (401, 503)

    live, ready = Watch(standby_base, LIVE_PATH), Watch(standby_base, READY_PATH)
    live.start()
    ready.start()
    assert j.coordinator is not None
    j.coordinator.kill()
    wait_for(lambda: "leads job" in standby.log(), 60, "the standby leading")
    # the watch's own answers, not a probe of ours: its last one may predate ours
    wait_for(lambda: ready.answers[-1:] == [(200, "leading")], 30, "the new leader ready")
    lived, readied = live.stop(), ready.stop()
    assert lived and all(status == 200 for status, _ in lived), lived
    assert readied[-1] == (200, "leading")
    p1 = processor_base(j, "p1")
    wait_for(lambda: probe(p1, READY_PATH)[0] == 200, 30, "p1 heard by the new leader")
    feeder.stop()


def test_a_processor_whose_loop_is_stuck_is_not_live(job, broker) -> None:
    from confluent_kafka import Producer

    j = job(job={"class": "tests.processor.api_jobs:HangsInP1"},
            processor={"loop_timeout_ms": 8000})
    feeder = start_two(j, broker)
    wait_for(lambda: feeder.sent > 200, 30, "some traffic")
    base = processor_base(j, "p1")
    assert probe(base, LIVE_PATH)[0] == 200
    live = Watch(base, LIVE_PATH)
    live.start()
    producer = Producer(j.config.kafka_settings())
    held = j.holding()["p1"][0]
    where = next(t["partitions"][0] for t in j.status()["tasks"] if t["name"] == held)
    topic, partition = where.rsplit(":", 1)
    producer.produce(topic, key=b"stuck", value=b"5", partition=int(partition))
    assert producer.flush(30) == 0
    stuck_at = time.monotonic()
    assert j.processors["p1"].wait(90) == 3
    answers = live.stop()
    feeder.stop()
    refused = [detail for status, detail in answers if status == 503]
    assert refused, answers
    assert refused[0].startswith("the main loop has not come round for "), refused
    assert "half of processor.loop_timeout_ms is 4s" in refused[0]
    assert time.monotonic() - stuck_at >= 4
    del j.processors["p1"]
