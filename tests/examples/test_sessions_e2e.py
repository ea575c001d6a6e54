"""The click-sessions example (examples/sessions) end to end: real daemons on Apache
Kafka under a live click stream that pauses now and then (so sessions end), scaled out
from two processors to three mid-stream, then one SIGKILLed; every session output is
checked against a brute-force model of session windows over the input topic. And the
example as its job.toml says to run it under `baton dev`, on its clicks file."""

from __future__ import annotations

import json
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devkit.embedded import free_port
from orchestrator.wire.barrier import input_records
from tests.feeder import Feeder
from tests.orchestrator.cli.test_dev import json_outputs, read_lines
from tests.orchestrator.conftest import job  # noqa: F401 - the fixture, shared
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sessions"
GAP_MS, GRACE_MS, MAX_PAGES = 250, 100, 20


def sessions_model(clicks: Iterable[tuple[int, bytes, str, int]]
                   ) -> tuple[dict[bytes, list[Any]], int]:
    """Per user, the sessions that end, in order, from (partition, user, page, timestamp)
    in partition-offset order, plainly: each partition's clock is the largest timestamp
    so far; before each click, the open sessions of its partition whose last click +
    gap + grace the clock reached end; a click whose own session would have ended is
    dropped; else it joins every open session of its user less than the gap from it.
    Returns the ended sessions and how many clicks were dropped."""
    clocks: dict[int, int] = {}
    open_: dict[int, dict[bytes, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    ended: dict[bytes, list[Any]] = defaultdict(list)
    dropped = 0
    for partition, user, page, stamp in clicks:
        clock = clocks[partition] = max(clocks.get(partition, stamp), stamp)
        for who, sessions in open_[partition].items():
            for s in sorted([s for s in sessions if s["end"] + GAP_MS + GRACE_MS <= clock],
                            key=lambda s: s["end"]):
                sessions.remove(s)
                ended[who].append(s)
        if stamp + GAP_MS + GRACE_MS <= clock:
            dropped += 1                                # late
            continue
        mine = open_[partition][user]
        near = sorted([s for s in mine if s["start"] - GAP_MS < stamp < s["end"] + GAP_MS],
                      key=lambda s: s["start"])
        merged = {"start": stamp, "end": stamp, "clicks": 0, "pages": []}
        if near:
            merged = dict(near[0])
            for s in near[1:]:
                merged = {"start": merged["start"], "end": max(merged["end"], s["end"]),
                          "clicks": merged["clicks"] + s["clicks"],
                          "pages": _listed(merged["pages"], s["pages"])}
        merged = {"start": min(merged["start"], stamp), "end": max(merged["end"], stamp),
                  "clicks": merged["clicks"] + 1, "pages": _listed(merged["pages"], [page])}
        mine[:] = [s for s in mine if s not in near] + [merged]
    return ended, dropped


def _listed(pages: list[str], more: list[str]) -> list[str]:
    listed = list(pages)
    for page in more:
        if page not in listed and len(listed) < MAX_PAGES:
            listed.append(page)
    return listed


def _pause(feeder: Feeder) -> None:
    feeder.pause()
    time.sleep(0.6)                                     # > gap + grace: sessions end
    feeder.resume()


def test_click_sessions_through_a_scale_out_and_a_sigkill(job, broker) -> None:  # noqa: F811
    j = job(job={"class": "sessions:ClickSessions", "path": [str(EXAMPLE)],
                 "params": {"gap_ms": GAP_MS, "grace_ms": GRACE_MS}},
            coordinator={"processor_timeout_ms": 3000})
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(map(len, j.holding().values())) == [2, 2],
             90, "p1 and p2 balanced")
    rng = random.Random(11)

    def click(_: int) -> tuple[bytes, int]:
        """A random user; now, or a little earlier (some past gap + grace: dropped)."""
        late = rng.choice([0, 0, 0, 0, 50, 150, 300, 600])
        return b"u%d" % rng.randrange(30), int(time.time() * 1000) - late

    feeder = Feeder(broker, j.config.job.inputs[0], rate=300.0, pick=click).start()
    wait_for(lambda: feeder.sent > 800, 30, "some clicks")
    _pause(feeder)
    j.start_processor("p3")
    waited = j.baton_wait()
    assert waited.returncode == 0, waited.stderr
    _pause(feeder)
    wait_for(lambda: feeder.sent > 2000, 30, "clicks after the scale-out")
    j.processors["p2"].kill()
    del j.processors["p2"]
    wait_for(lambda: sorted(j.holding()) == ["p1", "p3"]
             and sum(map(len, j.holding().values())) == 4, 90, "p1 and p3 holding all")
    _pause(feeder)
    sent = feeder.sent
    wait_for(lambda: feeder.sent > sent + 500, 30, "clicks after the kill")
    sent = feeder.stop()
    wait_for(lambda: j.all_consumed(sent), 120, f"all {sent} clicks consumed")
    j.check_running()

    clicks = [(m.partition(), m.key(), m.value().decode(), m.timestamp()[1])
              for m in input_records(broker.read_all(j.config.job.inputs[0]))]
    assert len(clicks) == sent
    expected, dropped = sessions_model(clicks)
    got: dict[bytes, list[Any]] = defaultdict(list)
    for m in broker.read_all(j.config.job.output):
        got[m.key()].append(json.loads(m.value()))
    assert dict(got) == dict(expected)
    # sessions of many clicks ended, and some clicks were late: the rules were exercised
    assert sum(map(len, expected.values())) >= 300
    assert any(s["clicks"] > 3 for ss in expected.values() for s in ss)
    assert dropped > 20


def test_the_example_runs_under_baton_dev(tmp_path: Path) -> None:
    """`baton dev` as the example's job.toml says, on its clicks.jsonl: the sessions
    that the clicks' own times end come out, the late click left out."""
    for name in ("job.toml", "sessions.py", "clicks.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    config = tmp_path / "job.toml"
    # a free port of its own, as a second `baton dev` on the host would need
    port = free_port()
    config.write_text(config.read_text().replace(
        '[coordinator]\n', f'[coordinator]\nlisten = "127.0.0.1:{port}"\n'
                           f'url = "http://127.0.0.1:{port}"\n'))
    err = tmp_path / "dev.err"
    with err.open("w") as stderr:
        dev = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "dev", "-c",
                                str(config), "--partitions", "1", "--input",
                                str(tmp_path / "clicks.jsonl")], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=read_lines, args=(dev.stdout, lines), daemon=True).start()
        try:
            shown = [(o["key"], json.loads(o["value"])) for o in json_outputs(lines, 3)]
        except AssertionError as exc:   # what `baton dev` said is where the cause is
            raise AssertionError(f"{exc}; baton dev's stderr ends:\n"
                                 f"{err.read_text()[-6000:]}") from None
    finally:
        dev.send_signal(signal.SIGINT)
        code = dev.wait(90)
    assert code == 0, err.read_text()
    t0 = 1_795_730_000_000
    assert shown == [
        ("bob", {"start": t0 + 5_000, "end": t0 + 5_000, "clicks": 1, "pages": ["/"]}),
        ("ann", {"start": t0, "end": t0 + 20_000, "clicks": 3,
                 "pages": ["/", "/pricing", "/docs"]}),
        ("bob", {"start": t0 + 90_000, "end": t0 + 90_000, "clicks": 1, "pages": ["/blog"]})]
