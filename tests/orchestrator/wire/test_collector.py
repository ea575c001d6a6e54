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


def _frozen(*objects: object) -> int:
    """How many of `objects` are in the permanent generation: tracked, yet in none of
    the three that collections walk. Asked of the objects themselves, not of
    `gc.get_freeze_count()`, which other threads of the test process move too."""
    walked = {id(o) for o in gc.get_objects()}
    return sum(gc.is_tracked(o) and id(o) not in walked for o in objects)


def _frozen_garbage_cycle(collector: Collector) -> weakref.ref[_Cycle]:
    """A garbage cycle the collector's next turn freezes. Automatic collections are held
    off until then: one set off by any thread's allocations would free it first."""
    gc.disable()
    try:
        cycle = weakref.ref(_Cycle())
        collector.turn(now=collector._frozen_at + collector.freeze_s)
    finally:
        gc.enable()
    return cycle


def test_survivors_are_frozen_and_cycles_freed_at_the_full_collection() -> None:
    collector = Collector(freeze_s=1.0, full_s=10.0)
    try:
        assert gc.get_freeze_count() > 0                    # frozen when made
        kept: list[list[int]] = [[] for _ in range(1000)]
        collector.turn(now=collector._frozen_at + 0.5)      # too soon: nothing frozen
        assert _frozen(*kept) == 0
        collector.turn(now=collector._frozen_at + 1.0)
        assert _frozen(*kept) == len(kept)                  # the lists are frozen now
        cycle = _frozen_garbage_cycle(collector)
        gc.collect()
        assert cycle() is not None                          # frozen: collections skip it
        collector.turn(now=collector.full_at + 10.0)
        assert collector.full_collections == 1
        assert cycle() is None
        assert _frozen(*kept) == len(kept)                  # frozen again after it
    finally:
        collector.close()
    assert gc.get_freeze_count() == 0
    assert _frozen(*kept) == 0


def test_a_full_collection_asked_for_comes_at_the_next_turn_past_the_gap() -> None:
    collector = Collector(freeze_s=1.0, full_s=600.0)
    try:
        cycle = _frozen_garbage_cycle(collector)                 # waits for a full one
        want_full_collection()
        collector.turn(now=collector.full_at + WANTED_GAP_S / 2)
        assert collector.full_collections == 0                  # too soon after the last
        assert cycle() is not None
        collector.turn(now=collector.full_at + WANTED_GAP_S)
        assert collector.full_collections == 1
        assert cycle() is None
        collector.turn(now=collector.full_at + WANTED_GAP_S)
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
        collector.turn(now=collector.full_at + 600.0)
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
