"""The coordinator process: main loop, leadership and its gate, the service's objects
(the guarded core with its stream writer and its replies in force, heartbeats,
operations, the loop's decisions and metric views), input growth, HTTP API and
heartbeat route, request limits, credentials (and a standby's token check), TLS,
partition monitor."""

__all__ = [
    "api", "credentials", "decisions", "gate", "growth", "guarded_core", "heartbeat_route",
    "heartbeats", "leader", "limits", "main", "monitor", "operations", "replies_in_force",
    "service", "standby_tokens", "stream_writer", "tls",
]
