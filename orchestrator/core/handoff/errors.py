"""Handoff errors: ours (`LocalHandoffError`: a bug or a bad call here) apart from a
peer's (`RemoteHandoffError`: a processor said something impossible)."""

from __future__ import annotations

__all__ = ["HandoffError", "LocalHandoffError", "RemoteHandoffError"]


class HandoffError(Exception):
    """Base of the handoff errors; `step()` never changes state when it raises."""


class LocalHandoffError(HandoffError):
    """The coordinator misused the state machine (a bug or an operator's wrong request)."""


class RemoteHandoffError(HandoffError):
    """A processor broke the handoff protocol; the driver logs it and drops the message.

    Attributes:
        processor: the processor whose message was rejected, when known.
    """

    def __init__(self, message: str, processor: str | None = None) -> None:
        super().__init__(message)
        self.processor = processor
