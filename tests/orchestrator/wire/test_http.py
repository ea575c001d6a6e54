"""httpx without its command line: every daemon and CLI start imports the client."""

from __future__ import annotations

import subprocess
import sys


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
