"""The composition root: the `baton` command, the only orchestrator code importing `processor/`."""

from __future__ import annotations

from orchestrator.cli.main import main

__all__ = ["main"]
