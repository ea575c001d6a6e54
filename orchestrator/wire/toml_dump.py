"""A config mapping written back as TOML: the demo, `baton dev` and the tests write
config files (tomllib only reads). Values are the config's kinds: strings, numbers,
booleans, lists and inline tables."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["dump_config"]


def dump_config(raw: dict[str, Any]) -> str:
    """Render a raw config mapping as TOML (the demo and tests write config files)."""
    lines: list[str] = []
    for section, values in raw.items():
        lines.append(f"[{section}]")
        lines.extend(f"{json.dumps(key)} = {_toml_value(value)}" for key, value in values.items())
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}"
                                for k, v in value.items()) + " }"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))
