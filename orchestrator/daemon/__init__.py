"""The coordinator process: main loop, service, HTTP API, partition monitor."""

__all__ = ["api", "main", "monitor", "service"]
