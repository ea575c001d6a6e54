"""A standby checks the bearer token too, before it answers that it is not the leader.

Every coordinator of a job must hold the same token (`baton token` writes it once). A
standby whose token differs would lock every processor and operator out the moment it
took over; checking the token on a standby makes that visible before a failover:
`baton check` asks every `coordinator.url` and names the one that refuses the token the
others accept. A request with neither the operator's nor the processors' token gets 401
from a standby as from the leader; the open endpoints (liveness, metrics, service
discovery, health) stay open.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

from orchestrator.daemon.credentials import Credentials, Kind, Refused

__all__ = ["OPEN_PATHS", "StandbyTokenCheck"]

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

# the endpoints that need no token, on a leader as on a standby (docs/design.md)
OPEN_PATHS = frozenset({"/containerHeartbeat", "/metrics", "/sd", "/healthz", "/readyz"})
_KINDS: tuple[Kind, ...] = ("operator", "processor")


class _Leading(Protocol):
    """What the check needs of the gate: whether the leader's API is mounted."""

    @property
    def app(self) -> Any: ...

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None: ...


class StandbyTokenCheck:
    """ASGI middleware in front of the gate: while it has no leader's API (a standby, or
    a coordinator starting), a guarded path needs a token the credentials accept.

    Args:
        gate: the coordinator's gate (orchestrator/daemon/gate.py).
        credentials: the tokens this coordinator accepts.
    """

    def __init__(self, gate: _Leading, credentials: Credentials) -> None:
        self._gate, self._credentials = gate, credentials

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if (scope["type"] == "http" and self._gate.app is None
                and scope.get("path", "") not in OPEN_PATHS
                and not self._accepted(_bearer(scope))):
            body = {"detail": "missing or wrong bearer token (see coordinator.token_file; "
                              "every coordinator of a job needs the same one)"}
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": json.dumps(body).encode()})
            return
        await self._gate(scope, receive, send)

    def _accepted(self, token: str | None) -> bool:
        for kind in _KINDS:
            try:
                self._credentials.check(kind, token)
            except Refused:
                continue
            return True
        return False


def _bearer(scope: _Scope) -> str | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None
