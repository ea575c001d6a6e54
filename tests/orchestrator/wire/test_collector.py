"""The daemons' collector: survivors are frozen each turn past freeze_s (automatic
collections then walk only what came since); everything is collected every full_s."""

from __future__ import annotations

import gc
import re
import weakref
from pathlib import Path

from orchestrator.wire.collector import TRIM_S, WANTED_GAP_S, Collector, want_full_collection


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_survivors_are_frozen_and_cycles_freed_at_the_full_collection() -> None:
    collector = Collector(freeze_s=1.0, full_s=10.0)
    try:
        start = gc.get_freeze_count()
        assert start > 0                                    # frozen when made
        kept = [object() for _ in range(10)] + [[] for _ in range(1000)]
        collector.turn(now=collector._frozen_at + 0.5)      # too soon: nothing frozen
        # (a frozen object another thread drops leaves the count: it can only go down)
        assert gc.get_freeze_count() <= start
        collector.turn(now=collector._frozen_at + 1.0)
        assert gc.get_freeze_count() >= start + 1000        # the lists are frozen now
        cycle = weakref.ref(_Cycle())                       # garbage, frozen at next turn
        collector.turn(now=collector._frozen_at + 1.0)
        gc.collect()
        assert cycle() is not None                          # frozen: collections skip it
        collector.turn(now=collector._full_at + 10.0)
        assert collector.full_collections == 1
        assert cycle() is None
        assert kept
    finally:
        collector.close()
    assert gc.get_freeze_count() == 0


def test_a_full_collection_asked_for_comes_at_the_next_turn_past_the_gap() -> None:
    collector = Collector(freeze_s=1.0, full_s=600.0)
    try:
        cycle = weakref.ref(_Cycle())
        collector.turn(now=collector._frozen_at + 1.0)          # frozen: waits for a full one
        want_full_collection()
        collector.turn(now=collector._full_at + WANTED_GAP_S / 2)
        assert collector.full_collections == 0                  # too soon after the last
        assert cycle() is not None
        collector.turn(now=collector._full_at + WANTED_GAP_S)
        assert collector.full_collections == 1
        assert cycle() is None
        collector.turn(now=collector._full_at + WANTED_GAP_S)
        assert collector.full_collections == 1                  # asked once, answered once
    finally:
        collector.close()


def _rss_mb() -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) // 1024   # type: ignore[union-attr]


def test_a_full_collection_gives_the_freed_heap_back() -> None:
    """Freed below a live block, 200 MB of small allocations stay in the process's RSS
    until the heap is trimmed: the full collection does it."""
    collector = Collector(full_s=600.0)
    try:
        blocks = [bytes(1024) + b"%d" % i for i in range(200_000)]
        live = bytes(1024) + b"live"
        before = _rss_mb()
        del blocks
        assert _rss_mb() > before - 50, "glibc keeps what was freed below a live block"
        collector.turn(now=collector._full_at + 600.0)
        assert _rss_mb() < before - 100
        assert live
    finally:
        collector.close()


def test_the_heap_is_trimmed_every_minute_between_full_collections() -> None:
    """A burst's freed C memory (a broker restart's new clients) goes back within
    TRIM_S, not at the next full collection ten minutes on."""
    collector = Collector(full_s=600.0)
    try:
        start = collector._trimmed_at
        blocks = [bytes(1024) + b"%d" % i for i in range(200_000)]
        live = bytes(1024) + b"live"
        before = _rss_mb()
        del blocks
        collector.turn(now=start + TRIM_S / 2)
        assert _rss_mb() > before - 50                      # not yet
        collector.turn(now=start + TRIM_S)
        assert _rss_mb() < before - 100
        assert collector.full_collections == 0
        assert live
    finally:
        collector.close()
