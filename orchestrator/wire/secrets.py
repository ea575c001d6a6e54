"""Secrets in `[kafka]`: values read from a file or the environment, and kept out of
everything Baton shows.

Any `[kafka]` value may be an inline table instead of a plain value::

    sasl.password = { file = "/etc/baton/kafka.password" }   # the file's content
    sasl.password = { env = "KAFKA_PASSWORD" }                # an environment variable

A file must be a regular file with mode 0600 or stricter, or 0640 with a group of the
process's own (the coordinator token's rule, `orchestrator.wire.token.is_private`); its
content counts without one trailing newline.
A missing, open, empty or unreadable file, and a missing or empty variable, are config
errors naming the key (`SecretError`); their messages never hold a value.

A value is *secret* when it came from a file or the environment, or when its key's name
says so (`is_secret_key`: password, secret, token, ...). librdkafka gets the real values;
everything shown to people gets `redact`ed settings, and free text that may quote a
value (log lines, a failed task's reason) is `mask`ed.

TOML parses unquoted dotted keys (`sasl.password = ...`) as nested tables, so `resolve`
also flattens them back to librdkafka's dotted names. A table is therefore a reference
only when it holds `file` or `env` (see `_is_reference`); a typo such as
`{ path = ... }` reads like the dotted key `sasl.password.path`, which librdkafka then
refuses by name when the daemon creates its first client.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.wire.token import is_private

__all__ = [
    "REDACTED", "Resolved", "SecretError", "is_secret_key", "mask", "redact", "resolve",
    "secret_values",
]

# What a secret value is replaced with (librdkafka's own config dump says the same).
REDACTED = "[redacted]"

# Key names whose values are secret however they are given: librdkafka's sensitive
# properties (sasl.password, ssl.key.password, ssl.keystore.password, ssl.key.pem,
# sasl.oauthbearer.config, sasl.oauthbearer.client.secret, ...assertion.private.key.
# passphrase / .pem) and the usual words. Redacting a harmless key (a token endpoint
# URL) costs nothing; missing a secret one would.
_SECRET_NAME = re.compile(
    r"password|passphrase|secret|token|credential|jaas|sasl\.oauthbearer\.config|key\.pem",
    re.IGNORECASE)

# librdkafka's own properties named `*.file` (2.10 on, OAUTHBEARER JWT assertions):
# written as unquoted dotted keys they parse exactly like `{ file = ... }` under their
# parent's name, so they stay settings.
_FILE_PROPERTIES = frozenset({
    "sasl.oauthbearer.assertion.file",
    "sasl.oauthbearer.assertion.jwt.template.file",
    "sasl.oauthbearer.assertion.private.key.file",
})

_SHAPE = ('a secret is given as {{ file = "path" }} or {{ env = "NAME" }} with a non-empty '
          "string, not a table with keys {}")


class SecretError(ValueError):
    """A `[kafka]` secret that cannot be resolved; `key` is the librdkafka key at fault.

    The message names the file or variable and what to do, never the value.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Resolved:
    """`[kafka]` flattened and resolved: librdkafka settings, and which came from a file
    or the environment."""

    settings: dict[str, Any]
    secret_keys: frozenset[str]


def resolve(table: Mapping[str, Any], locate: Callable[[str], Path],
            environ: Mapping[str, str], read: bool = True) -> Resolved:
    """Flatten a parsed `[kafka]` table and read every `{ file }` / `{ env }` value.

    Args:
        table: the `[kafka]` table as TOML parsed it.
        locate: a configured path as a file path (relative ones against the config).
        environ: the environment to read `{ env }` values from.
        read: False: check each reference's shape only, its value is `REDACTED`
            (for commands that never create a Kafka client).

    Raises:
        SecretError: naming the key (see the module docstring).
    """
    settings: dict[str, Any] = {}
    secret: set[str] = set()
    for key, value, from_secret in _entries(table, "", locate, environ, read):
        settings[key] = value
        if from_secret:
            secret.add(key)
    return Resolved(settings, frozenset(secret))


def _entries(table: Mapping[str, Any], prefix: str, locate: Callable[[str], Path],
             environ: Mapping[str, str], read: bool) -> Iterator[tuple[str, Any, bool]]:
    """(dotted key, value, came from a file or the environment), depth first."""
    for name, value in table.items():
        key = f"{prefix}{name}"
        if not isinstance(value, dict):
            yield key, value, False
        elif not value:
            raise SecretError(key, _SHAPE.format("[]"))
        elif _is_reference(key, value):
            yield key, _read(key, value, locate, environ, read), True
        else:
            yield from _entries(value, f"{key}.", locate, environ, read)


def _is_reference(key: str, table: Mapping[str, Any]) -> bool:
    """`{ file }` or `{ env }`, well formed or not: no librdkafka property has an `env`
    part, and only `_FILE_PROPERTIES` end in `file`."""
    return "env" in table or ("file" in table and f"{key}.file" not in _FILE_PROPERTIES)


def _read(key: str, reference: Mapping[str, Any], locate: Callable[[str], Path],
          environ: Mapping[str, str], read: bool) -> str:
    kind, name = _shape(key, reference)
    if not read:
        return REDACTED
    return _from_file(key, locate(name)) if kind == "file" else _from_env(key, name, environ)


def _shape(key: str, reference: Mapping[str, Any]) -> tuple[str, str]:
    """("file", path) or ("env", name), from exactly one key with a non-empty string."""
    (kind, name), *more = reference.items()
    if more or kind not in ("file", "env") or not isinstance(name, str) or not name:
        raise SecretError(key, _SHAPE.format(sorted(reference)))
    return kind, name


def _from_env(key: str, name: str, environ: Mapping[str, str]) -> str:
    value = environ.get(name)
    if value is None:
        raise SecretError(key, f"environment variable {name} is not set; set it for the "
                               "daemon, or give the value another way")
    if not value:
        raise SecretError(key, f"environment variable {name} is empty")
    return value


def _from_file(key: str, path: Path) -> str:
    """The file's content without one trailing newline, checked on the open file
    (so what is checked is what is read; O_NONBLOCK: a FIFO does not hang us)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise SecretError(key, f"secret file {path} not found") from None
    except OSError as exc:
        raise SecretError(key, f"cannot open secret file {path}: {exc.strerror}") from None
    try:
        status = os.fstat(fd)
        mode = status.st_mode
        if not stat.S_ISREG(mode):
            raise SecretError(key, f"secret file {path} is not a regular file")
        if not is_private(status):
            raise SecretError(key, f"secret file {path} is accessible by others or by a group "
                                   f"not this process's (mode {stat.S_IMODE(mode):04o}); "
                                   f"run 'chmod 600 {path}'")
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read()
    except OSError as exc:
        raise SecretError(key, f"cannot read secret file {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    try:
        value = _without_newline(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise SecretError(key, f"secret file {path} is not UTF-8 text") from None
    if not value:
        raise SecretError(key, f"secret file {path} is empty")
    return value


def _without_newline(text: str) -> str:
    """Editors end files with a newline; the secret is the line, not the line break."""
    for end in ("\r\n", "\n"):
        if text.endswith(end):
            return text[:-len(end)]
    return text


def is_secret_key(key: str) -> bool:
    """True when a key's name says its value is secret, however it was given."""
    return _SECRET_NAME.search(key) is not None


def redact(settings: Mapping[str, Any], secret_keys: Collection[str] = ()) -> dict[str, Any]:
    """`settings` with the value of every secret key (named in `secret_keys`, or
    secret by name) replaced by `REDACTED`: what logs and output may show."""
    return {key: REDACTED if key in secret_keys or is_secret_key(key) else value
            for key, value in settings.items()}


def secret_values(settings: Mapping[str, Any], secret_keys: Collection[str] = ()) -> list[str]:
    """The values `redact` hides, as text to `mask`; longest first, so a value that
    contains another is masked whole."""
    hidden = {value for key, value in settings.items()
              if (key in secret_keys or is_secret_key(key)) and isinstance(value, str) and value}
    return sorted(hidden, key=len, reverse=True)


def mask(text: str, values: Iterable[str]) -> str:
    """`text` with every occurrence of each secret value replaced by `REDACTED`.

    For free text that may quote a value (librdkafka's error for a bad setting, a log
    line); `values` as `secret_values` gives them.
    """
    for value in values:
        if value:
            text = text.replace(value, REDACTED)
    return text
