"""An Apache Kafka broker with a SASL_SSL listener (SCRAM-SHA-512) and ACLs, for tests.

Beside the PLAINTEXT listener of `KafkaBroker` (kept for the broker's own traffic and
for the test's administration: its principal, User:ANONYMOUS, is the super user) it
listens with SASL_SSL on a second free port, with a certificate for 127.0.0.1 signed
by a CA made at start (`ca_file` is what clients trust). KRaft's StandardAuthorizer
enforces ACLs there: a user may do only what `allow` granted, and nothing is allowed
where no ACL says so. `users.add` creates SCRAM-SHA-512 credentials (AlterUserScram
Credentials, through the metadata log).
"""

from __future__ import annotations

import datetime
import ipaddress
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from orchestrator.devkit.embedded import free_port
from orchestrator.devkit.kafka import KafkaBroker, KafkaBrokerError

__all__ = ["BrokerUsers", "SecureKafkaBroker"]

_TIMEOUT_S = 30.0
_SCRAM_ITERATIONS = 4096


def _certificates(directory: Path) -> tuple[Path, Path]:
    """A CA and a server certificate for 127.0.0.1/localhost. Returns (CA PEM file,
    server key + chain PEM file, as Kafka's PEM keystore reads it)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "baton test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
              .issuer_name(ca_name).public_key(key.public_key())
              .serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5))
              .not_valid_after(now + datetime.timedelta(days=2))
              .add_extension(x509.SubjectAlternativeName([
                  x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                  x509.DNSName("localhost")]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    ca_file, keystore = directory / "ca.pem", directory / "server.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    keystore.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption())
        + server.public_bytes(serialization.Encoding.PEM)
        + ca.public_bytes(serialization.Encoding.PEM))
    keystore.chmod(0o600)
    return ca_file, keystore


class SecureKafkaBroker(KafkaBroker):
    """`KafkaBroker` plus a SASL_SSL/SCRAM-SHA-512 listener and the StandardAuthorizer;
    its `users` are the credentials and ACLs of that listener."""

    def __init__(self, data_dir: Path | None = None,
                 settings: dict[str, str] | None = None) -> None:
        super().__init__(data_dir, settings=settings)
        self.secure_port = free_port()
        self.secure_bootstrap = f"127.0.0.1:{self.secure_port}"
        self.ca_file, keystore = _certificates(self.data_dir)
        self.users = BrokerUsers(self.bootstrap, self.secure_bootstrap, self.ca_file)
        self.settings.update({
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "authorizer.class.name":
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # the PLAINTEXT and CONTROLLER listeners' principal: the broker itself and
            # the test's administration
            "super.users": "User:ANONYMOUS",
        })

    def listener_properties(self) -> dict[str, str]:
        return {
            "listeners": (f"PLAINTEXT://127.0.0.1:{self.port},"
                          f"SASL_SSL://127.0.0.1:{self.secure_port},"
                          f"CONTROLLER://127.0.0.1:{self.controller_port}"),
            "advertised.listeners": (f"PLAINTEXT://127.0.0.1:{self.port},"
                                     f"SASL_SSL://127.0.0.1:{self.secure_port}"),
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        }


class BrokerUsers:
    """The SASL_SSL listener's users and what the authorizer lets them do, administered
    over the PLAINTEXT listener (its principal is the super user).

    Args:
        admin_bootstrap: the PLAINTEXT listener.
        secure_bootstrap: the SASL_SSL listener.
        ca_file: the CA the listener's certificate is signed by.
    """

    def __init__(self, admin_bootstrap: str, secure_bootstrap: str, ca_file: Path) -> None:
        self._admin_bootstrap = admin_bootstrap
        self._secure_bootstrap = secure_bootstrap
        self._ca_file = ca_file

    def client_settings(self, user: str, password: str) -> dict[str, Any]:
        """librdkafka settings of `user` on the SASL_SSL listener."""
        return {"bootstrap.servers": self._secure_bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": password, "ssl.ca.location": str(self._ca_file)}

    def add(self, user: str, password: str) -> None:
        """SCRAM-SHA-512 credentials for `user`; returns once they authenticate."""
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, _SCRAM_ITERATIONS)
        admin = AdminClient({"bootstrap.servers": self._admin_bootstrap})
        # the admin client is kept until the futures are done: its end fails them
        for future in admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(user, info, password.encode())]).values():
            future.result(_TIMEOUT_S)
        client = AdminClient({**self.client_settings(user, password), "log_level": 0})
        deadline = time.monotonic() + _TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                client.list_topics(timeout=2)
                return
            except Exception:  # noqa: BLE001 - not known to the listener yet
                time.sleep(0.1)
        raise KafkaBrokerError(f"user {user} cannot authenticate on {self._secure_bootstrap}")

    def acl(self, user: str, resource: ResourceType, name: str, operation: AclOperation,
            prefixed: bool = False, allow: bool = True) -> None:
        """Allow (or deny) `user` `operation` on `resource` `name` (or every name that
        starts with it)."""
        binding = AclBinding(resource, name,
                             ResourcePatternType.PREFIXED if prefixed
                             else ResourcePatternType.LITERAL,
                             f"User:{user}", "*", operation,
                             AclPermissionType.ALLOW if allow else AclPermissionType.DENY)
        admin = AdminClient({"bootstrap.servers": self._admin_bootstrap})
        for future in admin.create_acls([binding]).values():
            future.result(_TIMEOUT_S)
