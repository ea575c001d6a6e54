"""When a read is stalled (processor/runtime/stalls.py): its position stands still while
its target moved past it, for the timeout; declared once, retried every timeout, cleared
when the position moves. Pure decisions on a fake clock."""

from __future__ import annotations

from processor.runtime.stalls import Read, Stall, Watched, observe

READ: Read = ("Partition 0", "in:0")
TIMEOUT = 10.0


def _walk(steps: list[tuple[float, int, int | None]]
          ) -> tuple[dict[Read, Watched], list[tuple[float, Stall]]]:
    book: dict[Read, Watched] = {}
    found: list[tuple[float, Stall]] = []
    for now, position, target in steps:
        book, stalls = observe(book, now, {READ: (position, target)}, TIMEOUT)
        found += [(now, s) for s in stalls]
    return book, found


def test_a_read_whose_end_moves_while_it_stands_still_is_stalled_after_the_timeout() -> None:
    book, found = _walk([(0, 100, 100), (1, 100, 120), (10.9, 100, 150), (11, 100, 150)])
    assert [(at, s.first, s.position, s.target) for at, s in found] == [(11, True, 100, 150)]
    assert book[READ].stalled
    assert found[0][1].seconds == 11


def test_an_idle_read_at_its_end_is_never_stalled() -> None:
    book, found = _walk([(t, 100, 100) for t in range(0, 100, 5)])
    assert not found and not book[READ].stalled


def test_a_read_behind_a_target_that_does_not_move_is_not_stalled() -> None:
    """A trailing transaction marker keeps the target one past the last record for good:
    only records that came after the position stopped count."""
    _, found = _walk([(t, 100, 101) for t in range(0, 100, 5)])
    assert not found


def test_a_moving_read_is_never_stalled_however_far_behind() -> None:
    _, found = _walk([(t, 100 + t, 10_000 + 50 * t) for t in range(0, 100, 5)])
    assert not found


def test_a_stall_is_retried_every_timeout_and_cleared_when_the_read_moves() -> None:
    book, found = _walk([(0, 100, 100), (1, 100, 120), (11, 100, 130), (15, 100, 140),
                         (21, 100, 150), (31, 100, 160)])
    assert [(at, s.first) for at, s in found] == [(11, True), (21, False), (31, False)]
    book, stalls = observe(book, 32, {READ: (161, 161)}, TIMEOUT)
    assert not stalls and not book[READ].stalled


def test_the_timeout_counts_from_when_records_came_not_from_when_the_read_stopped() -> None:
    _, found = _walk([(0, 100, 100), (50, 100, 100), (55, 100, 110), (64, 100, 120),
                      (65, 100, 120)])
    assert [at for at, _ in found] == [65]


def test_an_unknown_target_watches_the_position_alone_and_a_read_gone_is_forgotten() -> None:
    book, found = _walk([(0, 100, None), (30, 100, None)])
    assert not found
    book, _ = observe(book, 31, {}, TIMEOUT)
    assert book == {}
