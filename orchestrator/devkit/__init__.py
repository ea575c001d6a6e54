"""Developer tooling: the embedded broker profile and the demo."""

__all__ = ["demo", "embedded"]
