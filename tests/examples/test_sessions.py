"""The example job of examples/sessions: its job.toml loads and names its class, and the
job class, imported the way the job.toml names it, on the in-memory harness with
explicit timestamps: sessions end on later traffic, merge, and drop late clicks."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire.config import load_config
from processor import Record
from processor.job import load_job
from processor.testing import JobHarness

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sessions"
PARAMS = {"gap_ms": 30_000, "grace_ms": 5_000}


@pytest.fixture
def click_sessions(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The job class, imported the way its job.toml names it (its directory on the path)."""
    config = load_config(EXAMPLE / "job.toml")
    for directory in reversed(config.job_path):
        monkeypatch.syspath_prepend(str(directory))
    return load_job(config.job.class_)


class Feed:
    """Clicks into a harness, with explicit timestamps and offsets 0, 1, ..."""

    def __init__(self, harness: JobHarness) -> None:
        self.harness = harness
        self.offsets = itertools.count()

    def clicks(self, *clicks: tuple[str, str, int]) -> list[tuple[str, dict[str, Any], int]]:
        """Send (user, page, timestamp) clicks; the sessions that ended meanwhile: (user,
        value, timestamp)."""
        ended = []
        for user, page, stamp in clicks:
            record = Record(user.encode(), page.encode(), "clicks", 0, next(self.offsets),
                            stamp)
            for out in self.harness.send(record):
                assert isinstance(out.key, bytes) and out.value is not None
                assert out.timestamp is not None
                ended.append((out.key.decode(), json.loads(out.value), out.timestamp))
        return ended


def test_the_example_config_is_valid_and_names_its_class() -> None:
    config = load_config(EXAMPLE / "job.toml")
    assert config.job.name == "click-sessions"
    assert config.job.class_ == "sessions:ClickSessions"
    assert config.job_path == [EXAMPLE]                # its code: beside the file
    assert config.job.inputs == ["clicks"]
    assert config.job.output == "click-sessions"
    assert config.job.params == PARAMS


def test_a_session_ends_on_later_traffic(click_sessions: Any) -> None:
    with JobHarness(click_sessions, params=PARAMS, partitions=["clicks:0"]) as harness:
        feed = Feed(harness)
        assert feed.clicks(("ann", "/", 1_000), ("ann", "/pricing", 20_000),
                           ("ann", "/", 45_000), ("bob", "/", 54_999)) == []
        # ann's session ends once the stream time reaches 45 000 + 30 000 + 5 000
        assert feed.clicks(("bob", "/docs", 79_999)) == []
        assert feed.clicks(("bob", "/docs", 80_000)) == [
            ("ann", {"start": 1_000, "end": 45_000, "clicks": 3,
                     "pages": ["/", "/pricing"]}, 45_000)]


def test_a_click_in_the_gap_merges_two_sessions(click_sessions: Any) -> None:
    with JobHarness(click_sessions, params=PARAMS, partitions=["clicks:0"]) as harness:
        feed = Feed(harness)
        # 31 s apart: two sessions, the first still open (its grace runs to 35 000)
        assert feed.clicks(("ann", "/a", 0), ("ann", "/b", 31_000)) == []
        assert feed.clicks(("ann", "/c", 15_000)) == []      # less than 30 s from each
        ended = feed.clicks(("bob", "/", 200_000))
    assert ended == [("ann", {"start": 0, "end": 31_000, "clicks": 3,
                              "pages": ["/a", "/b", "/c"]}, 31_000)]


def test_a_late_click_is_dropped(click_sessions: Any) -> None:
    with JobHarness(click_sessions, params=PARAMS, partitions=["clicks:0"]) as harness:
        feed = Feed(harness)
        first = feed.clicks(("ann", "/a", 0), ("bob", "/", 40_000))
        assert [(user, value["clicks"]) for user, value, _ in first] == [("ann", 1)]
        # its own session would have ended at 4 000 + 35 000: dropped
        assert feed.clicks(("ann", "/late", 4_000)) == []
        ended = feed.clicks(("bob", "/", 200_000))
    assert ended == [("bob", {"start": 40_000, "end": 40_000, "clicks": 1, "pages": ["/"]},
                      40_000)]


def test_a_session_lists_at_most_twenty_pages(click_sessions: Any) -> None:
    with JobHarness(click_sessions, params=PARAMS, partitions=["clicks:0"]) as harness:
        feed = Feed(harness)
        feed.clicks(*[("ann", f"/{n}", n * 1_000) for n in range(25)])
        ended = feed.clicks(("bob", "/", 100_000))
    (_, session, _), = ended
    assert session["clicks"] == 25
    assert session["pages"] == [f"/{n}" for n in range(20)]
