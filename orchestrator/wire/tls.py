"""TLS for the coordinator API's clients (processors, CLI, demo): verify the
coordinator with `coordinator.tls_ca_file`, present a certificate under mutual TLS.

A verification failure is a configuration problem, not a transient one: it is not
retried, and its message names `tls_ca_file`, the setting that fixes it.
"""

from __future__ import annotations

import ssl
from pathlib import Path

__all__ = ["TlsSettings", "client_context", "is_verification_error", "plain_http_context",
           "verification_hint"]


class TlsSettings:
    """What a client needs: the CA to verify with, and its own certificate (optional).

    Args:
        ca_file: the CA bundle that signed the coordinator's certificate (None: the
            system's CAs).
        cert_file: this client's certificate (mutual TLS), with `key_file`.
        key_file: its private key.
    """

    def __init__(self, ca_file: Path | None = None, cert_file: Path | None = None,
                 key_file: Path | None = None) -> None:
        self.ca_file, self.cert_file, self.key_file = ca_file, cert_file, key_file


def plain_http_context() -> ssl.SSLContext:
    """The context of a client whose coordinators are all plain http and that has no TLS
    file configured: it loads no CA store (the system's slows every daemon and CLI start,
    for nothing) and trusts no certificate, so an https answer it were ever
    sent to fails verification instead of being trusted."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """An SSL context that verifies the coordinator (hostname included).

    Raises:
        ValueError: a file cannot be read or is not PEM; the message names it.
    """
    try:
        context = ssl.create_default_context(
            cafile=str(settings.ca_file) if settings.ca_file else None)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"coordinator.tls_ca_file {settings.ca_file}: {exc}") from exc
    if settings.cert_file is not None:
        try:
            context.load_cert_chain(str(settings.cert_file),
                                    str(settings.key_file) if settings.key_file else None)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"client certificate {settings.cert_file}: {exc}") from exc
    return context


def is_verification_error(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a failed certificate verification."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError) \
                or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def verification_hint(url: str, exc: BaseException) -> str:
    return (f"cannot verify the coordinator's TLS certificate at {url}: {exc}; set "
            "coordinator.tls_ca_file to the CA (PEM) that signed it")
