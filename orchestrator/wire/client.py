"""HTTP client of the coordinator API, for the CLI and the processor daemon.

Bearer token on every call; bounded retries (tenacity) on what is worth retrying:
a connection that could not be made or broke, a timeout, and 5xx answers (the
coordinator restarting). 4xx answers are the caller's fault and surface at once with
the server's reason. When the retries run out the error names the URL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from orchestrator.wire.config import Config
from orchestrator.wire.http import httpx
from orchestrator.wire.protocol import HeartbeatReply, HeartbeatRequest
from orchestrator.wire.tls import (
    TlsSettings,
    client_context,
    is_verification_error,
    plain_http_context,
    verification_hint,
)

__all__ = [
    "CLI_RETRY",
    "HEARTBEAT_RETRY",
    "CoordinatorClient",
    "CoordinatorError",
    "CoordinatorUnreachable",
]

# The CLI: up to 4 attempts within ~10 s (0.25, 0.5, 1 s back-off), enough to ride out
# a coordinator restart, short enough that a dead one is reported promptly.
CLI_RETRY: dict[str, Any] = {
    "stop": stop_after_attempt(4) | stop_after_delay(10),
    "wait": wait_exponential(multiplier=0.25, max=2),
}
# A processor's heartbeat: one quick retry; the next heartbeat is the real retry, and
# the processor's own grace period (coordinator_grace_ms) decides when to give up.
HEARTBEAT_RETRY: dict[str, Any] = {
    "stop": stop_after_attempt(2),
    "wait": wait_exponential(multiplier=0.1, max=0.2),
}
_TIMEOUT_S = 10.0


class CoordinatorError(RuntimeError):
    """The coordinator answered with an error; `status` is the HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class CoordinatorUnreachable(CoordinatorError):
    """No answer from the coordinator after the retries."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 0)


class _Retry(Exception):
    """A 5xx answer, retried like a transport error."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, httpx.TransportError | _Retry) and not is_verification_error(exc)


class CoordinatorClient:
    """Calls to a job's coordinator: the leader among the configured URLs.

    Each call goes to the URL that last answered as the leader, then to the others; a
    standby's 503 names the leader, which is tried next when it is one of the
    configured URLs (a hint elsewhere is ignored: the token is not sent to it).

    Args:
        url: the coordinator's base URL, or every coordinator's (`coordinator.url`).
        token: the bearer token (`orchestrator.wire.token.read_token`).
        retry: a tenacity policy (`CLI_RETRY`, `HEARTBEAT_RETRY`).
        transport: an httpx transport (tests pass a `MockTransport` or an ASGI one).
        tls: the CA to verify an https coordinator with, and a client certificate.
    """

    def __init__(self, url: str | Sequence[str], token: str | Callable[[], str],
                 retry: dict[str, Any] | None = None, timeout: float = _TIMEOUT_S,
                 transport: httpx.BaseTransport | None = None,
                 tls: TlsSettings | None = None) -> None:
        self.urls = [u.rstrip("/") for u in ([url] if isinstance(url, str) else url)]
        self.url = self.urls[0]
        self._retry = CLI_RETRY if retry is None else retry
        self._token = token
        headers = {} if callable(token) else {"Authorization": f"Bearer {token}"}
        tls = tls or TlsSettings()
        wants_tls = any(u.startswith("https://") for u in self.urls) \
            or tls.ca_file is not None or tls.cert_file is not None
        verify = client_context(tls) if wants_tls else plain_http_context()
        self._http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport,
                                  headers=headers, verify=verify)

    @classmethod
    def for_config(cls, config: Config, token: str | Callable[[], str],
                   retry: dict[str, Any] | None = None, processor: bool = False
                   ) -> CoordinatorClient:
        """A client of `config`'s coordinator with its TLS settings: the CLI's client
        certificate, or with `processor` the processor's.

        Raises:
            ValueError: a TLS file cannot be read; the message names it.
        """
        c, p = config.coordinator, config.processor
        cert, key = ((p.tls_cert_file, p.tls_key_file) if processor
                     else (c.tls_client_cert_file, c.tls_client_key_file))
        tls = TlsSettings(config.file(c.tls_ca_file), config.file(cert), config.file(key))
        return cls(c.urls, token, retry, tls=tls)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None,
                params: dict[str, str] | None = None) -> Any:
        """One call with retries; returns the decoded JSON body.

        Raises:
            CoordinatorUnreachable: no answer (or only 5xx) after the retries.
            CoordinatorError: a 4xx answer, with the server's reason.
        """
        try:
            for attempt in Retrying(retry=retry_if_exception(_retriable), reraise=True,
                                    **self._retry):
                with attempt:
                    response = self._send(method, path, body, params)
                    if response.status_code >= 500:
                        raise _Retry(response)
        except _Retry as exc:
            raise CoordinatorUnreachable(
                f"coordinator at {self.url} answered {path} with HTTP "
                f"{exc.response.status_code}: {_reason(exc.response)}") from exc
        except httpx.TransportError as exc:
            if is_verification_error(exc):
                raise CoordinatorUnreachable(verification_hint(self.url, exc)) from exc
            raise CoordinatorUnreachable(
                f"coordinator at {' or '.join(self.urls)} is unreachable "
                f"({type(exc).__name__}: {exc}); "
                f"is 'baton coordinator' running, and is coordinator.url right?") from exc
        if response.status_code == 401:
            raise CoordinatorError(f"coordinator at {self.url} refused the token (401): "
                                   f"does coordinator.token_file match the coordinator's?", 401)
        if response.status_code == 403:
            raise CoordinatorError(f"coordinator at {self.url} refused {method} {path} (403): "
                                   f"{_reason(response)}", 403)
        if response.status_code >= 400:
            raise CoordinatorError(f"coordinator at {self.url} refused {method} {path} "
                                   f"(HTTP {response.status_code}): {_reason(response)}",
                                   response.status_code)
        return response.json()

    def _send(self, method: str, path: str, body: Any,
              params: dict[str, str] | None) -> httpx.Response:
        """One try at the leader: the last one first, then the others and any hint."""
        order = [self.url] + [u for u in self.urls if u != self.url]
        tried: set[str] = set()
        failure: httpx.TransportError | None = None
        standby: httpx.Response | None = None
        while order:
            url = order.pop(0)
            if url in tried:
                continue
            tried.add(url)
            try:
                response = self._http.request(method, f"{url}{path}", json=body,
                                              params=params, headers=self._auth())
            except httpx.TransportError as exc:
                if is_verification_error(exc) or len(self.urls) == 1:
                    raise
                failure = exc
                continue
            if not _is_standby(response):
                self.url = url
                return response
            standby = response
            leader = _leader_hint(response)
            if leader in self.urls:
                order.insert(0, leader)
        if standby is not None:
            return standby
        assert failure is not None
        raise failure

    def _auth(self) -> dict[str, str] | None:
        """A token given as a reader is read per request (a rotated file takes effect)."""
        if callable(self._token):
            return {"Authorization": f"Bearer {self._token()}"}
        return None

    # --- the endpoints ---------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/status")
        return result

    def plan(self, add: Sequence[str] = (), remove: Sequence[str] = ()) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/plan",
                                              {"add": list(add), "remove": list(remove)})
        return result

    def drain(self, processor: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/drain", {"processor": processor})
        return result

    def expand(self, topic: str, partitions: int) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/expand",
                                              {"topic": topic, "partitions": partitions})
        return result

    def split(self, dry_run: bool) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/split", {"dry_run": dry_run})
        return result

    def register(self, request: HeartbeatRequest) -> HeartbeatReply:
        return HeartbeatReply.model_validate(
            self.request("POST", "/processors/register", request.model_dump(mode="json")))

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatReply:
        return HeartbeatReply.model_validate(
            self.request("POST", "/processors/heartbeat", request.model_dump(mode="json")))

    def container_heartbeat(self, execution_id: str) -> bool:
        """The pinned liveness probe: is this execution still the valid one?"""
        body = self.request("GET", "/containerHeartbeat",
                            params={"executionContainerId": execution_id})
        return bool(body.get("alive"))


def _is_standby(response: httpx.Response) -> bool:
    """A standby coordinator's refusal (503 with `"standby": true`)."""
    if response.status_code != 503:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("standby") is True


def _leader_hint(response: httpx.Response) -> str:
    leader = response.json().get("leader")
    return leader.rstrip("/") if isinstance(leader, str) else ""


def _reason(response: httpx.Response) -> str:
    """The server's `detail`, or the start of the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:1000]
    return str(body)[:300]
