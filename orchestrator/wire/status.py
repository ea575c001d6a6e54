"""Reading the coordinator's `/status` answer (the pinned `baton status --json` shape)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["is_balanced"]


def is_balanced(status: Mapping[str, Any]) -> bool:
    """The target assignment is reached and no handoff is in flight: what `baton wait
    --until balanced` waits for (the coordinator's own `balanced` says only the first)."""
    return bool(status.get("balanced")) and not status.get("handoffs")
