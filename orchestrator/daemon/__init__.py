"""The coordinator process: main loop, leadership and its gate, the service and its
stream writer, input growth, HTTP API and heartbeat route, limits, credentials, TLS,
partition monitor."""

__all__ = [
    "api", "credentials", "gate", "growth", "heartbeat_route", "leader", "limits", "main",
    "monitor", "service", "stream_writer", "tls",
]
