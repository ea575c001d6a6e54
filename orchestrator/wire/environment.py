"""Settings from the environment: `BATON_<SECTION>__<KEY>` over the config file (pinned).

A container platform gives each pod the same file and its own environment, so any key
of any section may come from a variable named for it: upper case, two underscores
between the section and the key (`BATON_PROCESSOR__STATE_DIR`,
`BATON_COORDINATOR__LISTEN`), and two more for a key inside a table
(`BATON_JOB__PARAMS__THRESHOLD`). The environment wins over the file, and its values
are validated like the file's: an error names the variable beside the key.

A value is text, as the environment holds it; pydantic reads numbers and booleans out
of text as it does for the file's keys (`"500"` for an `_ms` key). A value that starts
with `[` or `{` is a TOML list or inline table (`BATON_JOB__INPUTS=["a", "b"]`), since a
list cannot be spelt otherwise. In `[kafka]` the key's underscores are librdkafka's dots
(`BATON_KAFKA__SASL_PASSWORD` sets `sasl.password`; `bootstrap_servers` keeps its
name); `[spark] conf` is given whole, as an inline table, since Spark's property names
have capitals. `[kafka]` and `[spark] conf` values from the environment count as
secrets, so they are redacted wherever settings are shown, as `{ env = ... }` values are.

Names with a single underscore after `BATON_` (`BATON_TEST_BROKER`, `BATON_KAFKA_LIBS`)
are not settings and are left alone.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ENV_PREFIX", "Overlay", "env_name", "overlay"]

ENV_PREFIX = "BATON_"
# BATON_SECTION__KEY[__SUBKEY...]: parts of letters, digits and single underscores
_NAME = re.compile(r"^BATON_([A-Z0-9]+(?:_[A-Z0-9]+)*)((?:__[A-Z0-9]+(?:_[A-Z0-9]+)*)+)$")


@dataclass(frozen=True)
class Overlay:
    """The config mapping with the environment's values laid over it.

    Attributes:
        raw: the merged mapping, as if the file had held the environment's values.
        sources: dotted key -> the variable it came from (`processor.state_dir` ->
            `BATON_PROCESSOR__STATE_DIR`); a `[kafka]` key is named librdkafka's way.
        kafka_secrets: the `[kafka]` keys whose values came from the environment.
        spark_secrets: the same for `[spark] conf`.
        problems: `file: variable: message` lines (an unknown section, a list that is
            not TOML); the variables at fault are not applied.
    """

    raw: dict[str, Any]
    sources: dict[str, str]
    kafka_secrets: frozenset[str]
    spark_secrets: frozenset[str]
    problems: list[str]


def env_name(dotted: str) -> str:
    """The variable that sets a dotted key: `processor.state_dir` ->
    `BATON_PROCESSOR__STATE_DIR`, `kafka.sasl.password` -> `BATON_KAFKA__SASL_PASSWORD`."""
    section, _, key = dotted.partition(".")
    if section == "kafka":
        return f"{ENV_PREFIX}KAFKA__{key.replace('.', '_').upper()}"
    return ENV_PREFIX + "__".join(part.upper() for part in dotted.split("."))


def overlay(raw: Mapping[str, Any], environ: Mapping[str, str], path: Path,
            sections: Collection[str]) -> Overlay:
    """Lay every `BATON_<SECTION>__<KEY>` variable of `environ` over `raw`.

    Args:
        raw: the config file's mapping (not changed).
        environ: the process's environment (or a test's).
        path: the config file, to name in problems.
        sections: the sections a config has (`job`, `kafka`, ...).
    """
    merged: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v
                              for k, v in raw.items()}
    sources: dict[str, str] = {}
    secret: dict[str, set[str]] = {"kafka": set(), "spark": set()}
    problems: list[str] = []
    for name in sorted(environ):
        match = _NAME.match(name)
        if match is None:
            continue
        section = match.group(1).lower()
        parts = [p.lower() for p in match.group(2).split("__")[1:]]
        if section not in sections:
            problems.append(f"{path}: {name}: no section [{section}] (the sections: "
                            f"{', '.join(sorted(sections))})")
            continue
        try:
            value = _value(environ[name])
        except tomllib.TOMLDecodeError as exc:
            problems.append(f"{path}: {name}: a value starting with [ or {{ is a TOML list "
                            f"or inline table: {exc}")
            continue
        keys = _keys(section, parts)
        if section == "spark" and keys[0] == "conf" and len(keys) > 1:
            problems.append(f"{path}: {name}: Spark's property names have dots and capitals "
                            "no variable name can spell: give the whole table, "
                            'BATON_SPARK__CONF={ "spark.driver.host" = "10.0.0.21" }')
            continue
        if not _place(merged, section, keys, value):
            problems.append(f"{path}: {name}: {section}.{'.'.join(keys[:-1])} is not a "
                            "table in the config file")
            continue
        dotted = ".".join([section, *keys])
        sources[dotted] = name
        if section == "kafka":
            secret["kafka"].add(keys[0])
        elif section == "spark" and keys[0] == "conf":
            secret["spark"].update(_table_keys(value))
    return Overlay(merged, sources, frozenset(secret["kafka"]), frozenset(secret["spark"]),
                   problems)


def _keys(section: str, parts: list[str]) -> list[str]:
    """The keys a variable's parts name: in `[kafka]`, one librdkafka name with dots."""
    if section != "kafka":
        return parts
    key = "_".join(parts)
    return [key if key == "bootstrap_servers" else key.replace("_", ".")]


def _value(text: str) -> Any:
    """Text as it is, or a TOML list or inline table when it starts like one."""
    if text.lstrip().startswith(("[", "{")):
        return tomllib.loads(f"v = {text}")["v"]
    return text


def _place(merged: dict[str, Any], section: str, keys: list[str], value: Any) -> bool:
    """Set merged[section][keys...] = value; False when a key on the way is no table."""
    table = merged.setdefault(section, {})
    if not isinstance(table, dict):
        return False
    for key in keys[:-1]:
        inner = table.get(key)
        if inner is None:
            inner = table[key] = {}
        elif isinstance(inner, dict):
            inner = table[key] = dict(inner)
        else:
            return False
        table = inner
    table[keys[-1]] = value
    return True


def _table_keys(value: Any) -> list[str]:
    return list(value) if isinstance(value, dict) else []
