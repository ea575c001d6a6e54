"""Binding a port that may be in use for a moment (orchestrator/wire/binding.py), on
real sockets and the tests' fake clock: tried again while in use, up to the bound; any
other error at once."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator

import pytest

from orchestrator.wire.binding import RETRY_EVERY_S, bind_retrying, in_use
from tests.clocks import FakeClock


@pytest.fixture
def held() -> Iterator[socket.socket]:
    """A port some other socket listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock


def _binder(port: int, calls: list[int], free_after: int | None = None,
            holder: socket.socket | None = None):   # type: ignore[no-untyped-def]
    def bind() -> socket.socket:
        calls.append(1)
        if free_after is not None and len(calls) > free_after and holder is not None:
            holder.close()          # the other program lets go
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            raise
        return sock
    return bind


def test_a_port_freed_within_the_bound_is_bound(held: socket.socket) -> None:
    clock, calls = FakeClock(), []
    port = held.getsockname()[1]
    sock = bind_retrying(_binder(port, calls, free_after=3, holder=held), 30.0, clock,
                         "test port")
    try:
        assert sock.getsockname()[1] == port
    finally:
        sock.close()
    assert len(calls) == 4 and clock.monotonic() == pytest.approx(3 * RETRY_EVERY_S)


def test_a_port_still_in_use_after_the_bound_raises_in_use(held: socket.socket) -> None:
    clock, calls = FakeClock(), []
    with pytest.raises(OSError) as raised:
        bind_retrying(_binder(held.getsockname()[1], calls), 2.0, clock, "test port")
    assert in_use(raised.value) and raised.value.errno == errno.EADDRINUSE
    assert clock.monotonic() == pytest.approx(2.0)
    assert len(calls) == int(2.0 / RETRY_EVERY_S) + 1


def test_a_bound_of_zero_tries_once(held: socket.socket) -> None:
    calls: list[int] = []
    with pytest.raises(OSError):
        bind_retrying(_binder(held.getsockname()[1], calls), 0.0, FakeClock(), "test port")
    assert len(calls) == 1


def test_an_address_that_is_not_this_host_s_is_not_tried_again() -> None:
    clock, calls = FakeClock(), []

    def bind() -> None:
        calls.append(1)
        with socket.socket() as sock:
            sock.bind(("192.0.2.1", 0))     # TEST-NET-1: never a local address

    with pytest.raises(OSError) as raised:
        bind_retrying(bind, 30.0, clock, "test address")
    assert not in_use(raised.value) and len(calls) == 1 and clock.monotonic() == 0


def test_a_stop_asked_for_meanwhile_ends_the_tries(held: socket.socket) -> None:
    clock, calls = FakeClock(), []
    with pytest.raises(OSError) as raised:
        bind_retrying(_binder(held.getsockname()[1], calls), 30.0, clock, "test port",
                      stopping=lambda: len(calls) >= 3)
    assert in_use(raised.value) and len(calls) == 3
