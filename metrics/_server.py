"""Exposition: render a registry, or serve it over HTTP on a background thread.

The processor serves its registry with `serve_metrics` (port 0: a free port, which it
reports to the coordinator as its `metrics_url`). The coordinator returns `render()`
from the /metrics route of its own HTTP API, with `CONTENT_TYPE`.

The server is prometheus_client's threading WSGI server: one daemon thread accepts,
one short-lived daemon thread per request. Besides `/metrics` it answers the paths its
owner gives (`extra`: the processor's `/healthz` and `/readyz`), each a function
called per request, and 404 to any other path. Its owner stops it with `close()`, which is
bounded: the accept loop notices within its poll interval (0.5 s).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, ThreadingWSGIServer

__all__ = ["CONTENT_TYPE", "MetricsServer", "render", "serve_metrics"]

# The content type of `render()`'s output: the classic text format, which every
# Prometheus server version understands.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# How long `close()` waits for the accept thread to end. It ends within the
# socketserver poll interval (0.5 s); more than that means a stuck thread.
_CLOSE_TIMEOUT_S = 5.0


def render(registry: CollectorRegistry) -> bytes:
    """The registry in the Prometheus text format (serve it with `CONTENT_TYPE`)."""
    return generate_latest(registry)


class MetricsServer:
    """A running metrics HTTP server; its owner must `close()` it (or use `with`)."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        self.host: str = str(httpd.server_address[0])
        self.port: int = int(httpd.server_address[1])

    @property
    def url(self) -> str:
        """The metrics URL, e.g. http://127.0.0.1:40123/metrics."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self, timeout: float = _CLOSE_TIMEOUT_S) -> None:
        """Stop accepting, close the socket, wait up to `timeout` s for the thread.

        Raises:
            TimeoutError: the accept thread did not end in time.
        """
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"metrics server on {self.url} did not stop in {timeout} s")

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


# a path's answer: (HTTP status, JSON body)
Answer = Callable[[], tuple[int, bytes]]


def serve_metrics(registry: CollectorRegistry, host: str = "127.0.0.1",
                  port: int = 0, extra: Mapping[str, Answer] | None = None
                  ) -> tuple[MetricsServer, int]:
    """Serve `registry` at http://host:port/metrics on a background thread.

    Args:
        registry: the registry to expose.
        host: the address to bind (loopback unless the operator says otherwise).
        port: the port; 0 picks a free one.
        extra: further paths and their answers (JSON).

    Returns:
        The server (close it when done) and the port it actually listens on.

    Raises:
        OSError: the address cannot be bound (in use, or not local).
    """
    class Server(ThreadingWSGIServer):
        address_family = _family(host)

    httpd = make_server(host, port, _app(registry, dict(extra or {})), Server,
                        handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, name="baton-metrics", daemon=True)
    thread.start()
    server = MetricsServer(httpd, thread)
    return server, server.port


class _QuietHandler(WSGIRequestHandler):
    """No line on stderr per request: Prometheus scrapes and probes come every few
    seconds, and the daemons log JSON lines of their own."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


def _family(host: str) -> int:
    import socket
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _app(registry: CollectorRegistry, extra: dict[str, Answer]) -> Callable[..., Any]:
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)   # type: ignore[no-any-return]
        answer = extra.get(path)
        if answer is None:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: /metrics" + b"".join(b", " + p.encode() for p in extra)]
        status, body = answer()
        start_response(f"{status} {'OK' if status == 200 else 'Service Unavailable'}",
                       [("Content-Type", "application/json"),
                        ("Content-Length", str(len(body)))])
        return [body]
    return app
