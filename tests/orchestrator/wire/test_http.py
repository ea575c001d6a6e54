"""httpx without its command line: every daemon and CLI start imports the client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def test_the_coordinator_client_does_not_import_httpx_command_line() -> None:
    code = ("import sys, orchestrator.wire.client, orchestrator.daemon.gate; "
            "print(sorted(m for m in ('httpx._main', 'rich', 'pygments') "
            "if sys.modules.get(m) is not None))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_httpx_still_works_without_it() -> None:
    from orchestrator.wire.http import httpx

    request = httpx.Request("GET", "http://127.0.0.1:1/x", params={"a": "1"})
    assert str(request.url) == "http://127.0.0.1:1/x?a=1"


def test_a_plain_http_client_loads_no_ca_store(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    """The system CA store costs ~15 ms of every daemon and CLI start: only a client that
    may speak TLS (an https URL, or a TLS file configured) loads it."""
    import ssl

    from orchestrator.wire.client import CoordinatorClient
    from orchestrator.wire.tls import TlsSettings

    loaded: list[object] = []
    real = ssl.create_default_context

    def counting(*args: object, **kwargs: object) -> ssl.SSLContext:
        loaded.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl, "create_default_context", counting)
    CoordinatorClient(["http://127.0.0.1:1", "http://127.0.0.1:2"], "t").close()
    assert loaded == []
    CoordinatorClient(["http://127.0.0.1:1", "https://127.0.0.1:2"], "t").close()
    assert len(loaded) == 1
    missing = tmp_path / "ca.pem"
    with pytest.raises(ValueError, match="tls_ca_file"):     # still checked with http
        CoordinatorClient("http://127.0.0.1:1", "t", tls=TlsSettings(missing))
