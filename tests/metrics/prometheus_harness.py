"""Run Debian's `prometheus` binary for tests, and find `promtool`.

`PrometheusServer.start(workdir, targets)` writes a config that scrapes `targets`
every second (honor_labels: true, so Baton's `job` label wins), keeps its TSDB in
`workdir`, listens on a free 127.0.0.1 port, and waits until /-/ready answers.
With `file_sd=True` the targets go to a file_sd target file instead of a static list,
and `set_targets()` rewrites it: Prometheus picks up new targets without a restart.
`query()` and `wait_for()` use the HTTP API; `stop()` ends the process it started,
by PID. Use it through the `prometheus_factory` fixture, which stops every server
it started.

The binaries come from Debian's `prometheus` package, which `./run test` installs as
root. A missing binary is a test failure with instructions, never a skip.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

__all__ = ["PrometheusServer", "require_binary"]

# A second is the shortest interval Prometheus accepts comfortably; tests wait a few.
SCRAPE_INTERVAL = "1s"
# Prometheus 2.x starts in well under a second on a warm machine; allow a slow CI host.
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
# How often Prometheus re-reads a file_sd target file besides watching it (inotify).
FILE_SD_REFRESH = "1s"
# A free port can be taken between probing and binding; start again this many times.
_BIND_ATTEMPTS = 3


def require_binary(name: str) -> str:
    """The path of `name` (prometheus or promtool), or fail the test saying how to get it."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"`{name}` is not on PATH. The metrics tests need Debian's `prometheus` package "
            "(it provides prometheus and promtool): run `./run test` as root, which installs "
            "it, or `apt-get install -y prometheus` (then stop the system service it may "
            "start: `systemctl stop prometheus`).",
            pytrace=False,
        )
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_targets(path: Path, targets: Sequence[str]) -> Path:
    """A file_sd target file listing `targets`, replaced atomically (never read half-written)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps([{"targets": list(targets)}], indent=2))
    os.replace(partial, path)
    return path


def write_config(path: Path, targets: Sequence[str], job_name: str,
                 rule_files: Sequence[Path] = (), file_sd: bool = False,
                 http_sd: str | None = None) -> Path:
    """A Prometheus config scraping `targets` every second (JSON is valid YAML);
    with `file_sd`, through the target file `targets.json` beside it; with `http_sd`
    (a URL such as the coordinator's /sd), also every target that URL lists."""
    discovery: dict[str, Any] = {"static_configs": [{"targets": list(targets)}]}
    if http_sd is not None:
        discovery["http_sd_configs"] = [{"url": http_sd, "refresh_interval": FILE_SD_REFRESH}]
    if file_sd:
        target_file = write_targets(path.with_name("targets.json"), targets)
        discovery = {"file_sd_configs": [{"files": [str(target_file)],
                                          "refresh_interval": FILE_SD_REFRESH}]}
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                   "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{
            "job_name": job_name,
            "honor_labels": True,
            **discovery,
        }],
    }
    path.write_text(json.dumps(config, indent=2))
    return path


class PrometheusServer:
    """A `prometheus` process this test started; stop it with `stop()`."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, workdir: Path) -> None:
        self.proc = proc
        self.port = port
        self.workdir = workdir
        self.url = f"http://127.0.0.1:{port}"
        self._http = httpx.Client(base_url=self.url, timeout=10.0)

    @classmethod
    def start(cls, workdir: Path, targets: Sequence[str], *, job_name: str = "baton",
              rule_files: Sequence[Path] = (), file_sd: bool = False,
              http_sd: str | None = None) -> PrometheusServer:
        """Start Prometheus scraping `targets` (host:port) with its data in `workdir`
        (with `file_sd`, through a target file that `set_targets` rewrites)."""
        binary = require_binary("prometheus")
        workdir.mkdir(parents=True, exist_ok=True)
        config = write_config(workdir / "prometheus.yml", targets, job_name, rule_files,
                              file_sd, http_sd)
        for attempt in range(1, _BIND_ATTEMPTS + 1):
            port = _free_port()
            server = cls._spawn(binary, config, workdir, port)
            try:
                server._wait_ready()
                return server
            except RuntimeError:
                server.stop()
                if attempt == _BIND_ATTEMPTS or "address already in use" not in server.log():
                    raise
        raise AssertionError("unreachable")

    @classmethod
    def _spawn(cls, binary: str, config: Path, workdir: Path, port: int) -> PrometheusServer:
        log = (workdir / "prometheus.log").open("wb")
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=info"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        return cls(proc, port, workdir)

    def set_targets(self, targets: Sequence[str]) -> None:
        """Replace the scraped targets (a server started with `file_sd=True` only)."""
        target_file = self.workdir / "targets.json"
        if not target_file.exists():
            raise AssertionError("set_targets needs a server started with file_sd=True")
        write_targets(target_file, targets)

    def log(self) -> str:
        """Prometheus' own log so far."""
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n"
                                   f"{self.log()[-3000:]}")
            try:
                if self._http.get("/-/ready").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"prometheus on {self.url} not ready after {START_TIMEOUT_S} s:\n"
                           f"{self.log()[-3000:]}")

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; the `data` of a successful answer."""
        reply = self._http.get(f"/api/v1/{path}", params=params)
        body = reply.json()
        if reply.status_code != 200 or body.get("status") != "success":
            raise AssertionError(f"Prometheus API /api/v1/{path} {params}: "
                                 f"{reply.status_code} {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector: [{"metric": {...}, "value": [ts, "v"]}, ...]."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_for(self, expr: str, predicate: Callable[[list[dict[str, Any]]], bool],
                 timeout: float = 30.0) -> list[dict[str, Any]]:
        """Query `expr` until `predicate(result)` holds; fail after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        result = self.query(expr)
        while not predicate(result):
            if time.monotonic() > deadline:
                targets = self.api("targets")["activeTargets"]
                raise AssertionError(f"{expr!r} did not reach the expected value in "
                                     f"{timeout} s; last result {result}; targets {targets}")
            time.sleep(0.25)
            result = self.query(expr)
        return result

    def stop(self) -> None:
        """Stop the process this object started (by its PID), killing it if it hangs."""
        self._http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
