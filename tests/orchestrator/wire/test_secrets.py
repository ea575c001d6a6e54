"""[kafka] secrets: `{ file }` / `{ env }` resolution, every error naming the key and the
config file, the one 0600 rule shared with the token file, and redaction wherever
settings are shown (settings, free text, log lines, Config's repr)."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire.config import ConfigError, dump_config, load_config
from orchestrator.wire.logs import setup_logging
from orchestrator.wire.secrets import REDACTED, is_secret_key, mask, redact, secret_values
from orchestrator.wire.token import TokenError, read_token

PASSWORD = "s3cr3t-from-file"
FROM_ENV = "s3cr3t-from-env"


def _job() -> dict[str, Any]:
    return {"name": "sums", "class": "processor.examples:RunningSum", "inputs": ["events"],
            "output": "sums"}


def _write(tmp_path: Path, kafka: str) -> Path:
    """A config file whose [kafka] table is `kafka` (TOML text, as an operator writes it)."""
    path = tmp_path / "job.toml"
    path.write_text(dump_config({"job": _job()}) +
                    f'[kafka]\nbootstrap_servers = "127.0.0.1:9092"\n{kafka}\n')
    return path


def _secret_file(path: Path, content: str = PASSWORD + "\n", mode: int = 0o600) -> Path:
    path.write_text(content)
    path.chmod(mode)
    return path


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    return str(raised.value)


# ---- resolution ---------------------------------------------------------------------------


def test_file_value_is_the_content_without_one_trailing_newline(tmp_path: Path) -> None:
    _secret_file(tmp_path / "pw", PASSWORD + "\n\n")
    config = load_config(_write(tmp_path, 'sasl.password = { file = "pw" }'))
    assert config.kafka_settings()["sasl.password"] == PASSWORD + "\n"
    assert config.secret_keys == {"sasl.password"}


@pytest.mark.parametrize("content", [PASSWORD, PASSWORD + "\n", PASSWORD + "\r\n"])
def test_file_value_line_endings(tmp_path: Path, content: str) -> None:
    _secret_file(tmp_path / "pw", content)
    config = load_config(_write(tmp_path, '"sasl.password" = { file = "pw" }'))
    assert config.kafka_settings()["sasl.password"] == PASSWORD


def test_relative_file_is_relative_to_the_config_not_the_cwd(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "etc").mkdir()
    _secret_file(tmp_path / "etc" / "pw")
    monkeypatch.chdir(tmp_path)
    config = load_config(_write(tmp_path / "etc", 'sasl.password = { file = "pw" }'))
    assert config.kafka_settings()["sasl.password"] == PASSWORD


def test_absolute_file(tmp_path: Path) -> None:
    pw = _secret_file(tmp_path / "pw")
    config = load_config(_write(tmp_path, f'ssl.key.pem = {{ file = "{pw}" }}'))
    assert config.kafka_settings()["ssl.key.pem"] == PASSWORD


def test_env_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATON_TEST_PW", FROM_ENV)
    config = load_config(_write(tmp_path, 'sasl.password = { env = "BATON_TEST_PW" }'))
    assert config.kafka_settings()["sasl.password"] == FROM_ENV
    assert config.secret_keys == {"sasl.password"}


def test_plain_values_keep_working(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, 'security.protocol = "SASL_SSL"\n'
                                          '"receive.message.max.bytes" = 1000000000'))
    settings = config.kafka_settings()
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["receive.message.max.bytes"] == 1_000_000_000
    assert settings["bootstrap.servers"] == "127.0.0.1:9092"
    assert config.secret_keys == frozenset()


def test_librdkafka_file_properties_stay_settings(tmp_path: Path) -> None:
    """librdkafka's own `*.file` keys, written unquoted, parse like `{ file = ... }`."""
    config = load_config(_write(tmp_path, 'sasl.oauthbearer.assertion.file = "/a.jwt"\n'
                                          'sasl.oauthbearer.assertion.private.key.file = "/k"'))
    settings = config.kafka_settings()
    assert settings["sasl.oauthbearer.assertion.file"] == "/a.jwt"
    assert settings["sasl.oauthbearer.assertion.private.key.file"] == "/k"
    assert config.secret_keys == frozenset()


def test_bootstrap_servers_from_a_file(tmp_path: Path) -> None:
    _secret_file(tmp_path / "servers", "10.0.0.1:9093\n")
    path = tmp_path / "job.toml"
    path.write_text(dump_config({"job": _job(),
                                 "kafka": {"bootstrap_servers": {"file": "servers"}}}))
    config = load_config(path)
    assert config.kafka_settings()["bootstrap.servers"] == "10.0.0.1:9093"
    assert config.shown_kafka_settings()["bootstrap.servers"] == REDACTED


def test_commands_without_kafka_clients_do_not_read_secrets(tmp_path: Path) -> None:
    """`baton status` and friends: shapes are checked, files and variables are not read."""
    config = load_config(_write(tmp_path, 'sasl.password = { file = "missing" }\n'
                                          'sasl.username = { env = "BATON_TEST_UNSET" }'),
                         read_secrets=False)
    assert config.kafka["sasl.password"] == config.kafka["sasl.username"] == REDACTED
    with pytest.raises(ConfigError, match="kafka.sasl.password: a secret is given as"):
        load_config(_write(tmp_path, 'sasl.password = { file = 1 }'), read_secrets=False)


# ---- errors: each names the key and the file, never the value ------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = _write(tmp_path, 'sasl.password = { file = "nope" }')
    assert _error(path) == (f"{path}: kafka.sasl.password: secret file "
                            f"{tmp_path / 'nope'} not found")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o601])
def test_file_open_to_group_or_others(tmp_path: Path, mode: int) -> None:
    pw = _secret_file(tmp_path / "pw", mode=mode)
    os.chown(pw, -1, _foreign_gid())
    path = _write(tmp_path, 'sasl.password = { file = "pw" }')
    message = _error(path)
    assert message.startswith(f"{path}: kafka.sasl.password: secret file {pw} is accessible "
                              f"by others or by a group not this process's "
                              f"(mode {mode:04o})")
    assert f"chmod 600 {pw}" in message
    assert PASSWORD not in message


def test_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir(mode=0o700)
    path = _write(tmp_path, 'sasl.password = { file = "dir" }')
    assert _error(path) == (f"{path}: kafka.sasl.password: secret file {tmp_path / 'dir'} "
                            "is not a regular file")


def test_empty_file(tmp_path: Path) -> None:
    _secret_file(tmp_path / "pw", "\n")
    path = _write(tmp_path, 'sasl.password = { file = "pw" }')
    assert _error(path).endswith("kafka.sasl.password: secret file "
                                 f"{tmp_path / 'pw'} is empty")


def test_missing_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATON_TEST_UNSET", raising=False)
    path = _write(tmp_path, '"sasl.password" = { env = "BATON_TEST_UNSET" }')
    assert _error(path).startswith(f"{path}: kafka.sasl.password: environment variable "
                                   "BATON_TEST_UNSET is not set")


def test_empty_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATON_TEST_EMPTY", "")
    path = _write(tmp_path, 'sasl.password = { env = "BATON_TEST_EMPTY" }')
    assert _error(path) == (f"{path}: kafka.sasl.password: environment variable "
                            "BATON_TEST_EMPTY is empty")


@pytest.mark.parametrize("table", [
    '{ file = "pw", env = "X" }',
    "{ file = 3 }",
    '{ env = "" }',
    '{ file = "pw", mode = "0600" }',
    '{ env = ["X"] }',
    "{}",
])
def test_wrong_inline_table_shape(tmp_path: Path, table: str) -> None:
    _secret_file(tmp_path / "pw")
    path = _write(tmp_path, f"sasl.password = {table}")
    assert _error(path).startswith(
        f'{path}: kafka.sasl.password: a secret is given as {{ file = "path" }} or '
        '{ env = "NAME" } with a non-empty string')


def test_derived_fields_cannot_be_set_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text('secret_keys = ["x"]\n' +
                    dump_config({"job": _job(), "kafka": {"bootstrap_servers": "h:1"}}))
    with pytest.raises(ConfigError, match="secret_keys: unknown top-level key"):
        load_config(path)


# ---- the one 0600 rule, shared with the token file ----------------------------------------


@pytest.mark.parametrize("mode,own_group,private", [
    (0o600, True, True), (0o400, True, True), (0o700, True, True),
    # a Kubernetes secret volume with fsGroup: group read, the pod's own group
    (0o640, True, True), (0o440, True, True),
    (0o640, False, False), (0o440, False, False), (0o604, True, False),
    (0o660, True, False), (0o650, True, False)])
def test_secret_files_follow_the_token_file_rule(tmp_path: Path, mode: int, own_group: bool,
                                                 private: bool) -> None:
    token = _secret_file(tmp_path / "token", mode=mode)
    pw = _secret_file(tmp_path / "pw", mode=mode)
    for made in (token, pw):
        os.chown(made, -1, os.getegid() if own_group else _foreign_gid())
    path = _write(tmp_path, 'sasl.password = { file = "pw" }')
    if private:
        read_token(token)
        load_config(path)
    else:
        with pytest.raises(TokenError, match="by others or by a group not this process's"):
            read_token(token)
        with pytest.raises(ConfigError, match="by others or by a group not this process's"):
            load_config(path)


def _foreign_gid() -> int:
    """A group this process is not in (the tests run as root, which may chown to it)."""
    own = {os.getegid(), *os.getgroups()}
    return next(gid for gid in range(54321, 60000) if gid not in own)


# ---- redaction ----------------------------------------------------------------------------


@pytest.mark.parametrize("key", [
    "sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
    "sasl.oauthbearer.config", "sasl.oauthbearer.client.secret", "sasl.jaas.config",
    "sasl.oauthbearer.assertion.private.key.passphrase", "SASL.PASSWORD",
])
def test_secret_by_name(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["bootstrap.servers", "sasl.username", "client.id",
                                 "security.protocol", "ssl.ca.location"])
def test_not_secret_by_name(key: str) -> None:
    assert not is_secret_key(key)


def test_redact_by_name_and_by_origin() -> None:
    settings = {"sasl.password": "a", "client.id": "b", "sasl.username": "c", "linger.ms": 5}
    assert redact(settings, {"client.id"}) == {
        "sasl.password": REDACTED, "client.id": REDACTED, "sasl.username": "c",
        "linger.ms": 5}
    assert sorted(secret_values(settings, {"client.id"})) == ["a", "b"]


def test_mask_replaces_longer_values_whole() -> None:
    values = secret_values({"sasl.password": "abc", "ssl.key.password": "abcdef"})
    assert values == ["abcdef", "abc"]
    assert mask("x abcdef y abc", values) == f"x {REDACTED} y {REDACTED}"
    assert mask("nothing here", []) == "nothing here"


def test_config_shows_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _secret_file(tmp_path / "pw")
    monkeypatch.setenv("BATON_TEST_ID", FROM_ENV)
    config = load_config(_write(tmp_path, 'sasl.password = { file = "pw" }\n'
                                          'client.id = { env = "BATON_TEST_ID" }\n'
                                          'ssl.key.password = "plain-but-secret"'))
    shown = config.shown_kafka_settings()
    assert shown["sasl.password"] == shown["client.id"] == shown["ssl.key.password"] == REDACTED
    assert shown["bootstrap.servers"] == "127.0.0.1:9092"
    text = repr(config) + str(config) + str(shown)
    for secret in (PASSWORD, FROM_ENV, "plain-but-secret"):
        assert secret not in text
        assert secret not in config.mask(f"librdkafka said {secret!r}")
    survives = config.model_copy(update={"spark": config.spark})
    assert survives.secret_keys == config.secret_keys


def test_resolved_settings_reach_the_kafka_clients(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the processor's consumers are constructed with holds the resolved values."""
    from orchestrator.wire.clock import SystemClock
    from processor.runtime import consumers

    _secret_file(tmp_path / "pw")
    monkeypatch.setenv("BATON_TEST_ID", FROM_ENV)
    config = load_config(_write(tmp_path, 'sasl.password = { file = "pw" }\n'
                                          'client.id = { env = "BATON_TEST_ID" }'))
    built: list[dict[str, Any]] = []
    monkeypatch.setattr(consumers, "Consumer", lambda settings: built.append(settings))
    consumers.Consumers(config, "baton.sums", SystemClock())
    assert len(built) == 4                      # active, replay, activation, lookup
    for settings in built:
        assert settings["sasl.password"] == PASSWORD
        assert settings["client.id"] == FROM_ENV


# ---- logs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_lines_never_carry_a_secret(monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    """Messages, arguments and tracebacks; in JSON also the escaped spelling."""
    secret = 'pa"ss\\wörd'
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr("sys.excepthook", sys.excepthook)         # setup_logging sets them
    monkeypatch.setattr("threading.excepthook", threading.excepthook)
    monkeypatch.setenv("BATON_LOG_FORMAT", fmt)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("test", "INFO", secrets=[secret])
        log = logging.getLogger("baton.test")
        log.info("settings %s", {"sasl.password": secret})
        try:
            raise RuntimeError(f"bad value {secret}")
        except RuntimeError:
            log.exception("failed")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    out = stream.getvalue()
    assert "settings" in out and "failed" in out and "RuntimeError" in out
    assert out.count(REDACTED) >= 2        # the argument, the exception in the traceback
    assert secret not in out and json.dumps(secret)[1:-1] not in out
