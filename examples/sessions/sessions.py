"""Per user, the sessions of their clicks: runs of clicks less than `gap_ms` apart.

Input records: key = the user id, value = the page clicked ("/pricing").
Output records, one per session once it has ended (the stream time of the user's input
partition has reached its last click + `gap_ms + grace_ms`): key = the user id, value =
JSON {"start": first click's time, "end": last click's time, "clicks": n, "pages": the
distinct pages in the order they were first seen, at most 20}, stamped with the last
click's time. A click that fills the gap between two open sessions merges them; one
read when the stream time has already reached its own time + `gap_ms + grace_ms` (its
session would have ended by then) is dropped.

Run it with its job.toml (see its header), or on the in-memory harness, which
tests/examples/test_sessions.py feeds with clicks at explicit times:

    from processor import Record
    from processor.testing import JobHarness

    with JobHarness(ClickSessions, params={"gap_ms": 30000, "grace_ms": 5000}) as harness:
        harness.send(Record(b"ann", b"/", "input", 0, 0, 1_000))
        harness.send(Record(b"ann", b"/pricing", "input", 0, 1, 20_000))
        print(harness.send(Record(b"bob", b"/", "input", 0, 2, 60_000)))   # ann's
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from processor import Context, Emitted, Job, Record, State, Timer
from processor.windows import Sessions, Window, WindowKey

# a session's pages are listed, not counted: a user who visits the whole site in one
# session should not make one output (and one state entry) grow without bound
MAX_PAGES = 20

Clicks = dict[str, Any]          # {"clicks": n, "pages": [...]}


def add_click(session: Clicks, record: Record) -> Clicks:
    """The session with one more click, its page listed if new."""
    page = (record.value or b"").decode("utf-8", "replace")
    return {"clicks": session["clicks"] + 1, "pages": _listed(session["pages"], [page])}


def merge_sessions(earlier: Clicks, later: Clicks) -> Clicks:
    """Two sessions a click joined: the earlier one's pages first."""
    return {"clicks": earlier["clicks"] + later["clicks"],
            "pages": _listed(earlier["pages"], later["pages"])}


def session_output(user: WindowKey, window: Window, session: Clicks) -> Emitted:
    """The output of an ended session."""
    return user, json.dumps({"start": window.start, "end": window.end, **session})


def _listed(pages: list[str], more: list[str]) -> list[str]:
    listed = list(pages)
    for page in more:
        if page not in listed and len(listed) < MAX_PAGES:
            listed.append(page)
    return listed


class ClickSessions(Job):
    def setup(self, context: Context) -> None:
        self.sessions = Sessions(
            context.timers, int(self.params.get("gap_ms", 30_000)), name="sessions",
            grace_ms=int(self.params.get("grace_ms", 5_000)), add=add_click,
            merge=merge_sessions, initial={"clicks": 0, "pages": []}, result=session_output)

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        yield from self.sessions.process(record, state)

    def on_timer(self, timer: Timer, state: State) -> Iterator[Emitted]:
        yield from self.sessions.on_timer(timer, state)
