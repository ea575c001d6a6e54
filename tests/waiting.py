"""Waiting for a condition in tests: polled until it holds or a deadline passes, never a
fixed sleep, so a slow machine makes a test slower, not flaky."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_for"]


def wait_for(condition: Callable[[], bool], timeout: float, what: str,
             step: Callable[[], object] | None = None) -> None:
    """Run `step` (or sleep) until `condition` holds; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        if step is not None:
            step()
        else:
            time.sleep(0.05)
