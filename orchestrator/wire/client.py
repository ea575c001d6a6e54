"""HTTP client of the coordinator API, for the CLI and the processor daemon.

Bearer token on every call; retries (tenacity) of what is transient, here and nowhere
else: a connection that could not be made or broke, a timeout, a 5xx answer (a
coordinator restarting), and a standby's 503 while no coordinator leads (the leader it
names is dead and no standby has taken over yet). A call keeps trying until its
deadline: the command's own time limit, or `CLI_LIMIT_S` per call when none is given.
Each try asks the coordinators in turn (the last leader first, then a standby's hint),
so the first answer after a takeover goes on at once. While it waits, the client says
why through `notify`; when time runs out the error names the coordinator that answered,
and what the others did. 4xx answers are the caller's fault and surface at once with
the server's reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential

from orchestrator.wire.clock import Clock, Deadline, SystemClock
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
    "CLI_LIMIT_S",
    "CoordinatorClient",
    "CoordinatorError",
    "CoordinatorUnreachable",
    "retry_until",
]

# How long a call keeps trying while no coordinator leads, unless its command gives a
# limit of its own: a standby leads within coordinator.takeover_ms (10 s by default) and
# a few seconds more to read the stream; a minute rides that out several times over and
# still tells a script within a minute that its job has no coordinator at all.
CLI_LIMIT_S = 60.0
# Between tries: 0.25 s, doubling to 1 s, so a new leader is found within a second.
_BACKOFF = wait_exponential(multiplier=0.25, max=1)
_TIMEOUT_S = 10.0
# A try made at the very end of a deadline still gets this long to be answered.
_MIN_TRY_S = 1.0


def retry_until(deadline: Deadline) -> dict[str, Any]:
    """The CLI's tenacity policy: retry what is transient until `deadline`, never
    sleeping past it.

    Args:
        deadline: the command's time limit.

    Returns:
        `stop` and `wait` arguments for `tenacity.Retrying`.
    """
    def stop(state: RetryCallState) -> bool:
        return deadline.expired()

    def wait(state: RetryCallState) -> float:
        return min(_BACKOFF(state), deadline.remaining())

    return {"stop": stop, "wait": wait}


class CoordinatorError(RuntimeError):
    """The coordinator answered with an error; `status` is the HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class CoordinatorUnreachable(CoordinatorError):
    """No coordinator answered as the leader before the deadline (or the retries ran
    out); the message names every coordinator and what it did."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 0)


@dataclass
class _Round:
    """One try at every coordinator: who answered what, who did not answer."""

    path: str
    answers: list[tuple[str, httpx.Response]] = field(default_factory=list)
    failures: list[tuple[str, httpx.TransportError]] = field(default_factory=list)

    def describe(self) -> str:
        """Each coordinator's outcome, those that answered first."""
        said = [f"coordinator at {url} answered {self.path} with HTTP {r.status_code}: "
                f"{_reason(r)}" for url, r in self.answers]
        silent = [f"coordinator at {url} is unreachable ({type(e).__name__}: {e})"
                  for url, e in self.failures]
        return "; ".join(said + silent)


class _Transient(Exception):
    """A round in which no coordinator answered as a working leader; retried."""

    def __init__(self, round_: _Round) -> None:
        super().__init__(round_.describe())
        self.round = round_


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, _Transient)


class CoordinatorClient:
    """Calls to a job's coordinator: the leader among the configured URLs.

    Each call goes to the URL that last answered as the leader, then to the others; a
    standby's 503 names the leader, which is tried next when it is one of the
    configured URLs (a hint elsewhere is ignored: the token is not sent to it).

    Args:
        url: the coordinator's base URL, or every coordinator's (`coordinator.url`).
        token: the bearer token (`orchestrator.wire.token.read_token`).
        retry: a tenacity policy of its own (the processor's heartbeat: one try, as
            the next heartbeat is its retry); without it a call retries until
            `deadline`.
        timeout: seconds one request may take.
        transport: an httpx transport (tests pass a `MockTransport` or an ASGI one).
        tls: the CA to verify an https coordinator with, and a client certificate.
        deadline: the command's time limit for every call; without it (and without
            `retry`), each call gets `CLI_LIMIT_S`. No request outlives it by more than
            `_MIN_TRY_S`.
        notify: told, in a sentence, why a call is still waiting (`waiting` True, at
            each retry), and who answered once one leads again (`waiting` False).
        clock: the clock of the deadlines and back-off sleeps.
    """

    def __init__(self, url: str | Sequence[str], token: str | Callable[[], str],
                 retry: dict[str, Any] | None = None, timeout: float = _TIMEOUT_S,
                 transport: httpx.BaseTransport | None = None,
                 tls: TlsSettings | None = None, deadline: Deadline | None = None,
                 notify: Callable[[str, bool], None] | None = None,
                 clock: Clock | None = None) -> None:
        self.urls = [u.rstrip("/") for u in ([url] if isinstance(url, str) else url)]
        self.url = self.urls[0]
        self._deadline, self._timeout = deadline, timeout
        self._notify = notify or (lambda message, waiting: None)
        self._clock = clock or SystemClock()
        self._token = token
        headers = {} if callable(token) else {"Authorization": f"Bearer {token}"}
        tls = tls or TlsSettings()
        wants_tls = any(u.startswith("https://") for u in self.urls) \
            or tls.ca_file is not None or tls.cert_file is not None
        verify = client_context(tls) if wants_tls else plain_http_context()
        self._http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport,
                                  headers=headers, verify=verify)
        # a fixed policy is built once: each `Retrying` forms a reference cycle with its
        # own state, which a call a second (the heartbeat) would leave to the garbage
        # collector's full pass (orchestrator/wire/collector.py) every time
        self._retrying = None if retry is None else self._retrying_for(retry)

    @classmethod
    def for_config(cls, config: Config, token: str | Callable[[], str],
                   retry: dict[str, Any] | None = None, processor: bool = False,
                   deadline: Deadline | None = None,
                   notify: Callable[[str, bool], None] | None = None,
                   clock: Clock | None = None) -> CoordinatorClient:
        """A client of `config`'s coordinator with its TLS settings: the CLI's client
        certificate, or with `processor` the processor's.

        Raises:
            ValueError: a TLS file cannot be read; the message names it.
        """
        c, p = config.coordinator, config.processor
        cert, key = ((p.tls_cert_file, p.tls_key_file) if processor
                     else (c.tls_client_cert_file, c.tls_client_key_file))
        tls = TlsSettings(config.file(c.tls_ca_file), config.file(cert), config.file(key))
        return cls(c.urls, token, retry, tls=tls, deadline=deadline, notify=notify,
                   clock=clock)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None,
                params: dict[str, str] | None = None) -> Any:
        """One call, retried until a leader answers or the deadline; returns the
        decoded JSON body.

        Raises:
            CoordinatorUnreachable: no leader answered in time (only 5xx answers, a
                standby's among them, or none); the message names who said what.
            CoordinatorError: a 4xx answer, with the server's reason.
        """
        if self._deadline is not None:
            deadline = self._deadline
        elif self._retrying is None:
            deadline = Deadline.after(self._clock, CLI_LIMIT_S)
        else:                           # a policy of its own: bounded by it alone
            deadline = Deadline(self._clock)
        started = self._clock.monotonic()
        retrying = (self._retrying if self._retrying is not None
                    else self._retrying_for(retry_until(deadline)))
        try:
            for attempt in retrying:
                with attempt:
                    response = self._send(method, path, body, params, deadline)
        except _Transient as exc:
            raise CoordinatorUnreachable(
                _gave_up(exc.round, self._clock.monotonic() - started)) from exc
        if attempt.retry_state.attempt_number > 1:
            self._notify(f"coordinator at {self.url} answered {path} as the leader", False)
        return _checked(response, self.url, method, path)

    def _retrying_for(self, policy: dict[str, Any]) -> Retrying:
        return Retrying(retry=retry_if_exception(_retriable), reraise=True,
                        sleep=self._clock.sleep, before_sleep=self._waiting, **policy)

    def _waiting(self, state: RetryCallState) -> None:
        """tenacity's `before_sleep`: say what the call waits for."""
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _Transient):
            self._notify(f"no coordinator leads yet: {exc.round.describe()}", True)

    def _send(self, method: str, path: str, body: Any, params: dict[str, str] | None,
              deadline: Deadline) -> httpx.Response:
        """One try at the leader: the last one first, then the others and any hint.

        Raises:
            _Transient: no answer, a standby's, or a 5xx from every coordinator.
            CoordinatorUnreachable: a coordinator's certificate was refused (not
                transient: the message says which CA to configure).
        """
        order = [self.url] + [u for u in self.urls if u != self.url]
        round_, tried = _Round(path), set[str]()
        timeout = min(self._timeout, max(_MIN_TRY_S, deadline.remaining()))
        while order:
            url = order.pop(0)
            if url in tried:
                continue
            tried.add(url)
            try:
                response = self._http.request(method, f"{url}{path}", json=body,
                                              params=params, headers=self._auth(),
                                              timeout=timeout)
                _unbind(response)
            except httpx.TransportError as exc:
                if is_verification_error(exc):
                    raise CoordinatorUnreachable(verification_hint(url, exc)) from exc
                round_.failures.append((url, exc))
                continue
            if response.status_code < 500:
                self.url = url
                return response
            round_.answers.append((url, response))
            leader = _leader_hint(response)
            if leader in self.urls:
                order.insert(0, leader)
        raise _Transient(round_)

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

    def forget(self, processor: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/forget", {"processor": processor})
        return result

    def expand(self, topic: str, partitions: int) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/expand",
                                              {"topic": topic, "partitions": partitions})
        return result

    def split(self, dry_run: bool) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/split", {"dry_run": dry_run})
        return result

    def autoscale_decision(self, decision: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/autoscale/decisions", decision)
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


def _unbind(response: httpx.Response) -> None:
    """httpx binds a response's stream to the response, to time it when it closes: a
    reference cycle holding the request and the body, which the heartbeat (once a
    second, 40 a second around a handoff) would leave to the garbage collector's full
    pass (orchestrator/wire/collector.py). The body is read and the stream closed by
    the time the call returns; only the cycle is left to break."""
    response.stream = httpx.ByteStream(b"")


def _leader_hint(response: httpx.Response) -> str:
    """The leader a standby's 503 names (`"standby": true, "leader": URL`), or ""."""
    try:
        body = response.json()
    except ValueError:
        return ""
    if response.status_code != 503 or not isinstance(body, dict) \
            or body.get("standby") is not True or not isinstance(body.get("leader"), str):
        return ""
    return str(body["leader"]).rstrip("/")


def _checked(response: httpx.Response, url: str, method: str, path: str) -> Any:
    """The JSON body of a leader's answer; 4xx become `CoordinatorError` naming `url`."""
    if response.status_code == 401:
        raise CoordinatorError(f"coordinator at {url} refused the token (401): "
                               f"does coordinator.token_file match the coordinator's?", 401)
    if response.status_code == 403:
        raise CoordinatorError(f"coordinator at {url} refused {method} {path} (403): "
                               f"{_reason(response)}", 403)
    if response.status_code >= 400:
        raise CoordinatorError(f"coordinator at {url} refused {method} {path} "
                               f"(HTTP {response.status_code}): {_reason(response)}",
                               response.status_code)
    return response.json()


def _gave_up(round_: _Round, elapsed: float) -> str:
    """Why a call failed: the last round, who answered first, and how long it tried."""
    waited = f" (kept trying for {elapsed:.0f} s)" if elapsed >= 1 else ""
    if round_.answers:
        return f"{round_.describe()}; no coordinator answered as the leader{waited}"
    return (f"{round_.describe()}; is 'baton coordinator' running, and is "
            f"coordinator.url right?{waited}")


def _reason(response: httpx.Response) -> str:
    """The server's `detail`, or the start of the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:1000]
    return str(body)[:300]
