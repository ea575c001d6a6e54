"""The coordinator's front door: the leader's API while it leads, a standby's answers
otherwise.

A leader whose lease lapsed (no stream write for three quarters of `takeover_ms`: it
was frozen, or cut off from the broker) answers like a standby without a leader until
its next write succeeds, so a deposed leader never answers from a stale state.
A standby answers every control request with 503, `"standby": true` and the leader's
URL (clients with several `coordinator.url`s go there next), serves its own
`/metrics` (`baton_coordinator_leader` 0, and none of the job's picture: only the leader
exports that), answers the pinned `GET /containerHeartbeat` with the leader's answer, so
a liveness probe may ask any coordinator, and the pinned `GET /sd` from the coordinator
stream it follows (`sd`, published by the daemon's loop; orchestrator/core/discovery.py),
so Prometheus may discover the processors through any coordinator. A coordinator that
is stopping answers every other request the same way, without a leader, from the moment
the stop begins.

`/healthz` and `/readyz` (orchestrator/wire/health.py) are the gate's own, answered
without a token in every state: live whenever it answers at all (its event loop turns);
ready when it leads with a confirmed lease, or is a standby that knows its leader, so a
platform never restarts a standby because the leader is down.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from prometheus_client import CollectorRegistry

from metrics import CONTENT_TYPE, render
from orchestrator.wire.clock import Clock
from orchestrator.wire.health import LIVE_PATH, READY_PATH, Probe
from orchestrator.wire.http import httpx
from orchestrator.wire.tls import TlsSettings, client_context

__all__ = ["Gate", "Lease"]

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_App = Callable[[_Scope, _Receive, _Send], Awaitable[None]]
_PROXY_TIMEOUT_S = 5.0
# read-only, and the pinned liveness answer keeps its shape for as long as it can
_ANSWERED_WHILE_STOPPING = frozenset({"/metrics", "/containerHeartbeat"})


class Lease:
    """Whether a leader's lease holds: a stream write within `lease_s`. It remembers
    when it was last found lapsed, since a processor whose heartbeat was refused then
    was not silent: the daemon's loop may have waited on that very write meanwhile, and
    so never saw the lapse itself (orchestrator/daemon/decisions.py).

    Args:
        clock: the daemon's clock (monotonic).
        last_write: when the stream was last written.
        lease_s: how long a write keeps the lease.
    """

    def __init__(self, clock: Clock, last_write: Callable[[], float], lease_s: float) -> None:
        self._clock, self._last_write, self._lease_s = clock, last_write, lease_s
        self.lapsed_at = -math.inf      # when a check last found it lapsed

    def __call__(self) -> bool:
        now = self._clock.monotonic()
        if now - self._last_write() < self._lease_s:
            return True
        self.lapsed_at = now
        return False


class Gate:
    """ASGI app: `app` (the leader's API) when set, the standby's answers when None.

    Args:
        job: the job name, for messages.
        registry: this coordinator's metrics registry.
        tls: how to reach the leader (its CA, a client certificate under mutual TLS).
    """

    def __init__(self, job: str, registry: CollectorRegistry, tls: TlsSettings) -> None:
        self.app: _App | None = None
        self.leader_url: str | None = None
        # whether the leader's lease holds (a recent stream write); set with `app`
        self.confirmed: Callable[[], bool] = lambda: True
        # the daemon is stopping: its stream may be closed under a request
        self.stopping = False
        # a standby's `/sd` answer from the stream it follows (None: not read yet);
        # replaced whole by the daemon's loop, never edited
        self.sd: list[dict[str, Any]] | None = None
        self._job, self._registry, self._tls = job, registry, tls

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        app = self.app
        if scope["type"] != "http":
            return
        path = scope.get("path", "")
        if path in (LIVE_PATH, READY_PATH):
            probe = self.live() if path == LIVE_PATH else self.ready()
            await _respond(send, probe.status, probe.body(), "application/json")
            return
        if self.stopping and path not in _ANSWERED_WHILE_STOPPING:
            # not a write against the stream the stop is closing: the others answer
            await self._refuse(send, "it is stopping; another coordinator takes over "
                               "within coordinator.takeover_ms")
            return
        if app is not None and (path == "/metrics" or self.confirmed()):
            await app(scope, receive, send)
            return
        if app is not None:     # frozen or cut off past its lease: it may be deposed
            await self._refuse(send, "this coordinator's leadership is unconfirmed (no "
                               "stream write within its lease); try the others")
            return
        sd = self.sd
        if path == "/metrics":
            await _respond(send, 200, render(self._registry), CONTENT_TYPE)
        elif path == "/sd" and sd is not None:
            await _respond(send, 200, json.dumps(sd).encode(), "application/json")
        elif path == "/containerHeartbeat" and self.leader_url:
            await self._relay(scope, send, self.leader_url)
        else:
            await self._refuse(send)

    def live(self) -> Probe:
        """`/healthz`: answering at all means the event loop turns."""
        return Probe(True, "stopping" if self.stopping else "the event loop turns")

    def ready(self) -> Probe:
        """`/readyz`: leading with a confirmed lease, or a standby knowing its leader."""
        if self.stopping:
            return Probe(False, "stopping; another coordinator takes over")
        if self.app is not None:
            return (Probe(True, "leading") if self.confirmed() else
                    Probe(False, "leading, but the lease is unconfirmed (no stream write "
                                 "within it)"))
        if self.leader_url:
            return Probe(True, f"standby; the leader is at {self.leader_url}")
        return Probe(False, "standby; no leader is known yet (one takes over within "
                            "coordinator.takeover_ms)")

    async def _refuse(self, send: _Send, why: str | None = None) -> None:
        where = (f"the leader is at {self.leader_url}" if self.leader_url
                 else "no leader is known yet (one takes over within coordinator.takeover_ms)")
        body = {"detail": f"standby coordinator of job {self._job}: {why or where}",
                "standby": True, "leader": None if why else self.leader_url}
        await _respond(send, 503, json.dumps(body).encode(), "application/json")

    async def _relay(self, scope: _Scope, send: _Send, leader: str) -> None:
        query = scope.get("query_string", b"").decode("latin-1")
        try:
            async with httpx.AsyncClient(verify=client_context(self._tls),
                                         timeout=_PROXY_TIMEOUT_S) as client:
                answer = await client.get(f"{leader}/containerHeartbeat?{query}")
        except httpx.HTTPError:
            await self._refuse(send)
            return
        await _respond(send, answer.status_code, answer.content, "application/json")


async def _respond(send: _Send, status: int, body: bytes, content_type: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
