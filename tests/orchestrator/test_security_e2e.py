"""Security end to end, with real daemons: TLS on the control API (a CA and
certificates made here), mutual TLS binding processor ids to certificate names, and
token rotation on SIGHUP.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from orchestrator.wire.client import CoordinatorClient, CoordinatorError
from orchestrator.wire.config import dump_config, load_config
from tests.daemon_support import coordinator_client
from tests.orchestrator.test_e2e import ROOT, Job
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


class Authority:
    """A throwaway CA issuing the coordinator's and the clients' certificates."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "baton test CA")])
        self.cert = self._builder(name, self.key.public_key(), name).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True,
        ).sign(self.key, hashes.SHA256())
        self.ca_file = self._write("ca.pem", self.cert.public_bytes(serialization.Encoding.PEM))

    @staticmethod
    def _builder(subject: x509.Name, public: Any, issuer: x509.Name) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                .public_key(public).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1)))

    def _write(self, name: str, data: bytes) -> Path:
        path = self.folder / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def issue(self, common_name: str, server: bool = False) -> tuple[Path, Path]:
        """(certificate file, key file) for `common_name`; a server one names 127.0.0.1."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = self._builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                              common_name)]),
                                key.public_key(), self.cert.subject)
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return (self._write(f"{common_name}.pem", cert.public_bytes(serialization.Encoding.PEM)),
                self._write(f"{common_name}.key", key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption())))


def rewrite(path: Path, name: str, **sections: dict[str, Any]) -> Path:
    """A copy of the config at `path` with keys changed (None removes a key)."""
    raw = tomllib.loads(path.read_text())
    for section, values in sections.items():
        for key, value in values.items():
            if value is None:
                raw.setdefault(section, {}).pop(key, None)
            else:
                raw.setdefault(section, {})[key] = value
    out = path.with_name(name)
    out.write_text(dump_config(raw))
    return out


def tls_job(job: Any, tmp_path: Path, mutual: bool = False, **sections: dict[str, Any]
            ) -> tuple[Job, Authority]:
    ca = Authority(tmp_path)
    cert, key = ca.issue("coordinator", server=True)
    base = job(**sections)
    coordinator = {"url": base.config.coordinator.url.replace("http://", "https://"),
                   "tls_cert_file": str(cert), "tls_key_file": str(key),
                   "tls_ca_file": str(ca.ca_file)}
    if mutual:
        operator_cert, operator_key = ca.issue("operator")
        coordinator |= {"tls_client_ca_file": str(ca.ca_file),
                        "tls_client_cert_file": str(operator_cert),
                        "tls_client_key_file": str(operator_key)}
    path = rewrite(base.path, "tls.toml", coordinator=coordinator)
    return Job(load_config(path), path, base.daemons), ca


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args],
                          capture_output=True, text=True, timeout=90, cwd=ROOT)


def test_tls_api_with_the_ca_file(job, tmp_path: Path) -> None:
    j, _ = tls_job(job, tmp_path)
    j.start_coordinator()
    j.start_processor("p1", shared=True)
    status = cli("status", "-c", str(j.path), "--json")
    assert status.returncode == 0 and '"p1"' in status.stdout, status.stderr
    # without the CA the CLI cannot verify the coordinator, and says which key fixes it
    blind = rewrite(j.path, "blind.toml", coordinator={"tls_ca_file": None})
    refused = cli("status", "-c", str(blind), "--json")
    assert refused.returncode == 1 and "tls_ca_file" in refused.stderr, refused.stderr
    # plain HTTP to the TLS port: a clean failure, and the coordinator serves on
    plain = j.config.coordinator.url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{plain}/containerHeartbeat", params={"executionContainerId": "x"},
                  timeout=10).raise_for_status()
    assert cli("status", "-c", str(j.path)).returncode == 0
    assert j.holding() == {"p1": [f"Partition {i}" for i in range(4)]}
    j.check_running()


def test_mutual_tls_binds_processor_ids_to_certificates(job, tmp_path: Path) -> None:
    j, ca = tls_job(job, tmp_path, mutual=True)
    j.start_coordinator()
    for pid, name in (("p1", "p1"), ("p2", "p1")):      # p2 holds p1's certificate
        cert, key = ca.issue(name) if pid == "p1" else (tmp_path / "p1.pem", tmp_path / "p1.key")
        own = rewrite(j.path, f"{pid}.toml", processor={
            "tls_cert_file": str(cert), "tls_key_file": str(key),
            "state_dir": str(tmp_path / f"state-{pid}")})
        j.processors[pid] = j.daemons(pid, "processor", "-c", own, "--id", pid)
    wait_for(lambda: "p1" in j.holding(), 60, "p1 registered")
    wait_for(lambda: "does not match the client certificate" in j.processors["p2"].log(), 60,
             "p2 refused")
    assert "p2" not in {p["id"] for p in j.status()["processors"]}
    # a client without any certificate does not get through the handshake
    anonymous = CoordinatorClient(j.config.coordinator.url, "x",
                                  retry={"stop": lambda state: True})
    with pytest.raises(CoordinatorError):
        anonymous.container_heartbeat("x")


def test_sighup_rotates_the_tokens_with_a_grace(job, tmp_path: Path) -> None:
    processor_token = tmp_path / "processor.token"
    j = job(coordinator={"token_grace_ms": 4000, "processor_token_file": str(processor_token)})
    j.start_coordinator()
    j.start_processor("p1")
    operator_old = j.config.token_file.read_text().strip()
    assert processor_token.stat().st_mode & 0o777 == 0o600
    url = j.config.coordinator.url

    def status_with(token: str) -> int:
        return httpx.get(f"{url}/status", headers={"Authorization": f"Bearer {token}"},
                         timeout=10).status_code

    assert status_with(processor_token.read_text().strip()) == 403
    for path in (j.config.token_file, processor_token):
        fresh = path.with_suffix(".new")
        fresh.write_text(f"rotated-{path.stem}-0123456789\n")
        fresh.chmod(0o600)
        os.replace(fresh, path)
    assert j.coordinator is not None
    os.kill(j.coordinator.pid, signal.SIGHUP)
    wait_for(lambda: status_with("rotated-coordinator-0123456789") == 200, 10, "the new token")
    rotated_at = time.monotonic()
    assert status_with(operator_old) == 200              # within the grace
    wait_for(lambda: status_with(operator_old) == 401, 15, "the old token refused")
    assert time.monotonic() - rotated_at >= 2.5
    # p1 re-reads its token file per request: it rode through the rotation
    time.sleep(1.0)
    j.client = coordinator_client(j.config)
    p1 = next(p for p in j.status()["processors"] if p["id"] == "p1")
    assert p1["alive"] and p1["seconds_since_heartbeat"] < 2, p1
    j.check_running()
