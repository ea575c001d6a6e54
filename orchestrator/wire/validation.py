"""Validation errors of a config file as an operator reads them: one line per key,
`file: key: message`, every error at once (`orchestrator.wire.config` raises them
together in one ConfigError)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["check_ports", "describe_errors"]

# pydantic names a union's branch in an error's location (metrics_port: int | table
# gives "int" and "dict[str,int]"); it is no key of the file
_BRANCH = re.compile(r"^(int|str|float|bool|(dict|list)\[.*\])$")
_FORMS = {"dict": "a table", "list": "a list", "int": "a number", "str": "a string",
          "float": "a number", "bool": "true or false"}


def describe_errors(path: Path, errors: Sequence[Any],
                    sources: Mapping[str, str] | None = None) -> list[str]:
    """Each validation error as `file: key: message` (a rule across keys names them);
    a value that fits no form of a union is one line naming the forms. A key whose
    value came from the environment (`sources`: key -> variable) names the variable:
    `file: key (from BATON_...): message`."""
    lines: dict[str, str] = {}
    for error in errors:
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key (misspelt?)"
        parts = [str(part) for part in error["loc"]]
        branch = next((i for i, part in enumerate(parts) if _BRANCH.match(part)), None)
        key = ".".join(parts if branch is None else parts[:branch])
        if branch is not None:
            form = _FORMS.get(parts[branch].split("[")[0], parts[branch])
            if key in lines:
                lines[key] += f"; or {form}: {message}"
                continue
            message = f"expected {form}: {message}"
        shown = f"{key} (from {(sources or {})[key]})" if key in (sources or {}) else key
        lines.setdefault(key, f"{path}: {shown}: {message}" if key else f"{path}: {message}")
    return list(lines.values())


def check_ports(port: int | dict[str, int]) -> int | dict[str, int]:
    """`processor.metrics_port`: one port, or one per processor id, none shared.

    Raises:
        ValueError: naming the processor id and the port at fault.
    """
    ports = port if isinstance(port, dict) else {"": port}
    for pid, one in ports.items():
        if not 0 <= one <= 65535:
            raise ValueError(f"{pid + ': ' if pid else ''}{one} is not a port (0-65535)")
    fixed = [one for one in ports.values() if one]
    if len(set(fixed)) != len(fixed):
        raise ValueError("two processors share a port")
    return port
