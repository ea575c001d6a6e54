"""A bound on request bodies (`coordinator.max_request_bytes`): a larger one gets 413
before any of it is parsed, so no caller can make the coordinator buffer or validate
an arbitrarily large heartbeat.

The body is read here, up to the bound, and handed on whole: refusing mid-stream from
inside the app would surface as a 500 from the framework's error handler.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["BodyLimit"]

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_App = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: refuse bodies over `max_bytes` with 413 (bad lengths: 400)."""

    def __init__(self, app: _App, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await _refuse(send, 400, "Content-Length is not a number")
                return
            if int(declared) > self.max_bytes:
                await _refuse(send, 413, self._too_large(int(declared)))
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return          # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _refuse(send, 413, self._too_large(size))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal sent
            if sent:
                return await receive()      # only a disconnect comes after the body
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _too_large(self, size: int) -> str:
        return (f"request body of {size} bytes or more is over the limit of "
                f"{self.max_bytes} (coordinator.max_request_bytes)")


async def _refuse(send: _Send, status: int, reason: str) -> None:
    body = json.dumps({"detail": reason}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
