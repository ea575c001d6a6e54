"""The coordinator process: main loop, leadership and its gate, the service (with its
stream writer and its replies in force), input growth, HTTP API and heartbeat route,
request limits, credentials, TLS, partition monitor."""

__all__ = [
    "api", "credentials", "gate", "growth", "heartbeat_route", "leader", "limits", "main",
    "monitor", "replies_in_force", "service", "stream_writer", "tls",
]
