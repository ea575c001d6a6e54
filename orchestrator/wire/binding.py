"""Binding a fixed port that may be in use for a moment: tried again for a bounded time.

A daemon restarted at once (by systemd, after a crash or a deploy) may find its fixed
port still held: by its previous execution finishing its stop, or by an outgoing
connection of another program that the kernel gave that port as its ephemeral one
(a fixed port inside `net.ipv4.ip_local_port_range`). Both go away within seconds to
minutes. A port still in use past the bound is reported as such, so the daemon exits
with a code its supervisor restarts (docs/operations.md, "Exit codes"); any other bind
error (an address that is not this host's) is a configuration error and is not retried.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from typing import TypeVar

from orchestrator.wire.clock import Clock, Deadline

__all__ = ["RETRY_EVERY_S", "in_use", "bind_retrying"]

log = logging.getLogger("baton.bind")

# how often a port in use is tried again: it frees at a moment nobody announces, and a
# bind costs nothing
RETRY_EVERY_S = 0.25

_T = TypeVar("_T")


def in_use(exc: OSError) -> bool:
    """Is `exc` a bind refused because the address is in use (worth trying again)?"""
    return exc.errno == errno.EADDRINUSE


def _never() -> bool:
    return False


def bind_retrying(bind: Callable[[], _T], timeout_s: float, clock: Clock,
                  what: str, stopping: Callable[[], bool] = _never) -> _T:
    """Call `bind` until it succeeds, trying again while the address is in use.

    Args:
        bind: binds (and returns what it bound); raises OSError when it cannot.
        timeout_s: how long an address in use is tried again; 0: once.
        clock: the daemon's clock (waits between tries on it).
        what: the address and its setting, for the log (`127.0.0.1:9101
            (processor.metrics_port)`).
        stopping: whether the daemon was asked to stop meanwhile (then the last
            error is raised at once).

    Returns:
        What `bind` returned.

    Raises:
        OSError: the address was still in use after `timeout_s` (`in_use()` says so),
            or another bind error at once.
    """
    deadline = Deadline.after(clock, timeout_s)
    warned = False
    while True:
        try:
            return bind()
        except OSError as exc:
            if not in_use(exc) or deadline.expired() or stopping():
                raise
            if not warned:
                log.warning("%s is in use; trying again for up to %.0f s", what, timeout_s)
                warned = True
        clock.sleep(min(RETRY_EVERY_S, deadline.remaining()))
