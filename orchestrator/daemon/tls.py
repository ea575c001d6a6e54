"""TLS on the coordinator's API: the server context, and under mutual TLS the client
certificate's common name passed to the app (the ASGI "tls" extension's
`client_cert_name`), which uvicorn does not do itself.

Why bind processor ids to certificates: with one CA issuing a certificate per host,
a processor id must equal its certificate's common name, so a host that is broken into
cannot register as, and so stop, another host's processor.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["PeerNameProtocol", "peer_name", "server_context"]


def server_context(cert_file: Path, key_file: Path, client_ca_file: Path | None
                   ) -> ssl.SSLContext:
    """The API's TLS context; with `client_ca_file`, clients must present a certificate
    it signed.

    Raises:
        ValueError: a file cannot be read or is not PEM; the message names the key.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(cert_file), str(key_file))
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"coordinator.tls_cert_file {cert_file} / coordinator.tls_key_file "
                         f"{key_file}: {exc}") from exc
    if client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(client_ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"coordinator.tls_client_ca_file {client_ca_file}: {exc}") from exc
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class PeerNameProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, passing the client certificate's common name on."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        name = _common_name(transport.get_extra_info("peercert"))
        inner = self.app

        async def app(scope: Any, receive: Any, send: Any) -> None:
            extensions = dict(scope.get("extensions") or {})
            extensions["tls"] = {"client_cert_name": name}
            await inner({**scope, "extensions": extensions}, receive, send)

        self.app = app


def _common_name(cert: Any) -> str | None:
    """The subject's commonName of a decoded peer certificate (`getpeercert()`)."""
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def peer_name(scope: Any) -> str | None:
    """The client certificate's common name, when the connection has one."""
    tls = (scope.get("extensions") or {}).get("tls") or {}
    name = tls.get("client_cert_name")
    return str(name) if name else None
