"""The several-host harness of tests/test_hosts.py: the walk-through's hosts
(orchestrator/devkit/walkthrough.py) as network namespaces, each with a folder as its
file system, and its steps run on them.

A host's `/etc/baton` and `/var/lib/baton` are folders of the test's (`HostFiles`); a
step's command is run as written on its host, with those two paths rooted there. The
operator's host (`ops`) is the test process's own namespace, on the bridge's address.
"""

from __future__ import annotations

import datetime
import ipaddress
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.devkit.hosts import Host, Network
from orchestrator.devkit.walkthrough import (
    ETC,
    HOSTS,
    JOB,
    STATE,
    Step,
    coordinator_urls,
    job_toml,
)
from tests.daemon_support import Daemon

__all__ = ["HostFiles", "Sidecars", "Walk", "issue_certificates"]

ROOT = Path(__file__).resolve().parents[1]


class HostFiles:
    """Where each host's files live: `<base>/<host>/etc/baton` and `.../var/lib/baton`."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def root(self, host: str) -> Path:
        return self.base / host

    def local(self, host: str, text: str) -> str:
        """`text` with the walk-through's paths on `host` made the test's folders."""
        root = self.root(host)
        return text.replace(ETC, f"{root}{ETC}").replace(STATE, f"{root}{STATE}")

    def etc(self, host: str) -> Path:
        return Path(self.local(host, ETC))


def issue_certificates(files: HostFiles, loopback: bool = False) -> None:
    """A CA on every host, and a certificate naming its address on each coordinator
    (`loopback`: 127.0.0.1 too, for clients that reach it through a local proxy)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def builder(subject: x509.Name, issuer: x509.Name, key: Any) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1)))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "walk-through CA")])
    ca = builder(ca_name, ca_name, ca_key).add_extension(
        x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(
        ca_key, hashes.SHA256())
    for h in HOSTS:
        etc = files.etc(h.name)
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        if h.role != "coordinator":
            continue
        key = ec.generate_private_key(ec.SECP256R1())
        cert = builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, h.name)]),
                       ca_name, key).add_extension(x509.SubjectAlternativeName(
                           [x509.IPAddress(ipaddress.ip_address(a)) for a in
                            (h.address, *(["127.0.0.1"] if loopback else []))]),
                           critical=False).sign(ca_key, hashes.SHA256())
        (etc / "coordinator.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        private = etc / "coordinator.key"
        private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
        private.chmod(0o600)


class Walk:
    """The walk-through on a network: each host's job.toml written (with `rename`
    applied, so several jobs can share one broker), and its steps run.

    Args:
        net: the network, with a host for every walk-through host but ops.
        files: the hosts' folders.
        daemons: tests/conftest.py's factory (kills what is left at teardown).
        settings: keys added to every host's job.toml, by section (a test's short
            timeouts).
        rename: the job's and topics' names in this run.
    """

    def __init__(self, net: Network, files: HostFiles, daemons: Callable[..., Daemon],
                 settings: dict[str, dict[str, int]] | None = None,
                 rename: dict[str, str] | None = None) -> None:
        self.net, self.files, self.daemons = net, files, daemons
        self.settings = settings or {}
        self.rename = rename or {}
        self.running: dict[str, Daemon] = {}
        for h in HOSTS:
            if h.role == "broker":
                continue
            self.files.etc(h.name).mkdir(parents=True, exist_ok=True)
            (self.files.etc(h.name) / "job.toml").write_text(self.config_text(h.name))

    def name(self, key: str) -> str:
        return self.rename.get(key, JOB[key])

    def config_text(self, host: str) -> str:
        text = self.files.local(host, job_toml(host))
        for key in ("name", "input", "output"):
            text = text.replace(f'"{JOB[key]}"', f'"{self.name(key)}"')
        for section, values in self.settings.items():
            lines = "".join(f"{k} = {v}\n" for k, v in values.items())
            text = text.replace(f"[{section}]\n", f"[{section}]\n{lines}", 1)
        return text

    def config_path(self, host: str) -> Path:
        return self.files.etc(host) / "job.toml"

    def host(self, name: str) -> Host | None:
        return None if name == "ops" else self.net.hosts[name]

    def argv(self, step: Step) -> list[str]:
        words = shlex.split(self.files.local(step.host, step.command))
        assert words[0] == "baton", step
        return [sys.executable, "-m", "orchestrator.cli", *words[1:]]

    def baton(self, step: Step, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """A `baton` command of `step`, on its host."""
        host = self.host(step.host)
        argv = self.argv(step)
        return subprocess.run(host.command(argv) if host else argv, capture_output=True,
                              text=True, timeout=timeout, cwd=ROOT)

    def copy(self, step: Step) -> None:
        """`scp -p FILE HOST:DIR/` between the hosts' folders (the mode kept)."""
        *_, source, target = shlex.split(step.command)
        host, _, folder = target.partition(":")
        src = Path(self.files.local(step.host, source))
        dst = Path(self.files.local(host, folder)) / src.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)

    def start(self, step: Step) -> Daemon:
        """A daemon of `step` (`baton coordinator` or `baton processor`) on its host."""
        host = self.host(step.host)
        assert host is not None
        args = self.argv(step)[3:]
        name = f"{step.host}-{args[0]}"
        daemon = self.daemons(name, *args, prefix=host.command([]))
        self.running[step.host] = daemon
        return daemon


class Sidecars:
    """Delay proxies on processor hosts in front of the coordinators
    (orchestrator/devkit/delay_proxy.py): a processor's `coordinator.url` lists
    `https://127.0.0.1:<port>` for each coordinator, which its host's proxy forwards to
    the coordinator's address, so its API calls take the latency of the delay file too.
    Stopped (by PID) by `close()`."""

    FIRST_PORT = 18700

    def __init__(self, delay_file: Path) -> None:
        self.delay_file = delay_file
        self.procs: list[subprocess.Popen[bytes]] = []

    def urls(self) -> list[str]:
        return [f"https://127.0.0.1:{self.FIRST_PORT + i}"
                for i in range(len(coordinator_urls()))]

    def start(self, host: Host, log: Path) -> None:
        for local, remote in zip(self.urls(), coordinator_urls(), strict=True):
            with log.open("ab") as out:
                self.procs.append(subprocess.Popen(host.command([
                    sys.executable, "-m", "orchestrator.devkit.delay_proxy",
                    "--listen", local.removeprefix("https://"),
                    "--to", remote.removeprefix("https://"),
                    "--delay-file", str(self.delay_file)]), stdout=out,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT))

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        self.procs.clear()
