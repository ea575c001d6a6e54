"""httpx, imported without its own command line.

httpx imports its command-line client (click, rich, pygments) whenever they are
installed, as they are for Baton's CLI: a noticeable part of every daemon and CLI start
(`python -X importtime` shows it), for a tool Baton never runs. A None in `sys.modules` makes
that one import fail, and httpx then defines a stub instead, as it does when those
packages are missing.
"""

from __future__ import annotations

import sys

if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

import httpx  # noqa: E402 - after the entry above

__all__ = ["httpx"]
