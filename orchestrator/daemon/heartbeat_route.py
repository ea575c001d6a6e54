"""`POST /processors/heartbeat` answered in front of FastAPI.

Why: it is the one request every processor sends every second, and at 1,000 processors
FastAPI's middleware, routing and dependency solving cost more CPU than the heartbeat
itself. This route does the same checks in the same order, with the same answers: the
processor token (401/403), the body validated by the same pydantic model (422 with the
same `detail` and `errors`), the certificate's name under mutual TLS (403), the reports
(422), then the service (404 unknown processor, 503 persistence trouble). FastAPI keeps
the route for its schema and serves every other path.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio.to_thread
from confluent_kafka import KafkaException
from pydantic import ValidationError

from orchestrator.core.coordinator import UnknownProcessor
from orchestrator.daemon.credentials import Credentials, Refused
from orchestrator.daemon.heartbeats import Heartbeats, InvalidReport
from orchestrator.daemon.tls import peer_name
from orchestrator.kafka.stream import StreamError
from orchestrator.wire.protocol import HeartbeatRequest

__all__ = ["HEARTBEAT_PATH", "MAX_WAIT_MS", "HeartbeatRoute", "validation_reply"]

log = logging.getLogger("baton.coordinator.api")

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_App = Callable[[_Scope, _Receive, _Send], Awaitable[None]]

HEARTBEAT_PATH = "/processors/heartbeat"
# a long poll never outlasts a processor's request timeout (5 s)
MAX_WAIT_MS = 2_000
# a plain heartbeat finding the core busy retries after 1, 2, 4 ... 8 ms, for 2 s at most
_RETRY_FIRST_S, _RETRY_MAX_S, _RETRY_FOR_S = 0.001, 0.008, 2.0


class _Answer(Exception):
    """A refusal: its status, reason and extra body fields."""

    def __init__(self, status: int, body: dict[str, Any],
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(body.get("detail"))
        self.status, self.body, self.headers = status, body, headers or []


class HeartbeatRoute:
    """ASGI: heartbeats here, everything else to `app` (the FastAPI application)."""

    def __init__(self, app: _App, heartbeats: Heartbeats, credentials: Credentials,
                 bind_ids: bool) -> None:
        self.app, self._heartbeats, self._credentials = app, heartbeats, credentials
        self._bind_ids = bind_ids

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http" or scope["path"] != HEARTBEAT_PATH \
                or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        try:
            reply = await self._answer(scope, receive)
        except _Answer as refused:
            await _respond(send, refused.status, json.dumps(refused.body).encode(),
                           refused.headers)
            return
        await _respond(send, 200, reply, [])

    async def _answer(self, scope: _Scope, receive: _Receive) -> bytes:
        self._authorize(scope)
        request = _parse(await _body(receive))
        if self._bind_ids and peer_name(scope) != request.processor_id:
            raise _Answer(403, {"detail": f"processor id {request.processor_id!r} does not "
                                          f"match the client certificate's common name "
                                          f"{peer_name(scope)!r}"})
        wait_s = min(request.wait_ms or 0, MAX_WAIT_MS) / 1000
        try:
            self._heartbeats.check_reports(request)
            if wait_s <= 0 and not request.leaving:
                reply = await self._plain(request)
                if reply is not None:
                    return reply
            # a thread: a long poll waits, a goodbye or a failed write is persisted
            return await anyio.to_thread.run_sync(self._heartbeat, request, wait_s)
        except (UnknownProcessor, InvalidReport) as exc:
            raise _Answer(404 if isinstance(exc, UnknownProcessor) else 422,
                          {"detail": str(exc)}) from None
        except (StreamError, KafkaException) as exc:
            log.error("POST %s: %s", HEARTBEAT_PATH, exc)
            raise _Answer(503, {"detail": str(exc)}) from None

    async def _plain(self, request: HeartbeatRequest) -> bytes | None:
        """A plain heartbeat on this event loop: while a decision holds the core's lock
        it retries every few milliseconds (handing each to a thread instead made the
        threads queue on the lock, and every later heartbeat behind them: seconds).
        None: it needs the thread path (a write waits to be retried)."""
        delay, waited = _RETRY_FIRST_S, 0.0
        while waited < _RETRY_FOR_S:
            reply = self._heartbeats.try_heartbeat(request)
            if reply is not None:
                return reply.model_dump_json().encode()
            if self._heartbeats.unpersisted:
                return None
            await anyio.sleep(delay)
            waited += delay
            delay = min(2 * delay, _RETRY_MAX_S)
        return None

    def _heartbeat(self, request: HeartbeatRequest, wait_s: float) -> bytes:
        return self._heartbeats.heartbeat(request, wait_s).model_dump_json().encode()

    def _authorize(self, scope: _Scope) -> None:
        given = None
        for name, value in scope.get("headers") or ():
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                given = token.strip() if scheme.lower() == "bearer" and token.strip() else None
                break
        try:
            self._credentials.check("processor", given)
        except Refused as exc:
            headers = [(b"www-authenticate", b"Bearer")] if exc.status == 401 else None
            raise _Answer(exc.status, {"detail": str(exc)}, headers) from None


async def _body(receive: _Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _Answer(400, {"detail": "the client went away"})
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _parse(body: bytes) -> HeartbeatRequest:
    try:
        return HeartbeatRequest.model_validate_json(body)
    except ValidationError as exc:
        raise _Answer(422, validation_reply(
            [{**e, "loc": ("body", *e.get("loc", ()))} for e in exc.errors()])) from None


def validation_reply(errors: Any) -> dict[str, Any]:
    """The 422 body of every endpoint: the first error as `detail`, all as `errors`."""
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    reason = f"{where}: {first.get('msg', 'invalid request')}" if first else "invalid request"
    return {"detail": reason, "errors": [
        {k: (str(v) if k in ("ctx", "input") else v) for k, v in error.items()
         if k in ("loc", "msg", "type")} for error in errors]}


async def _respond(send: _Send, status: int, body: bytes,
                   headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})
