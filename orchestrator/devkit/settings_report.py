"""What a demo's or a benchmark's daemons run with that differs from Baton's defaults,
read from the config file they were given, so every figure is printed beside the
settings it was measured with (a figure at the defaults shows none).

Where a job and its daemons are (names, topics, addresses, paths, token files) is left
out: it is not a setting a figure depends on. Every [kafka] key is listed: those are
librdkafka's, with defaults of their own.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestrator.wire.config import Config

__all__ = ["changed_settings"]

# where things are, not how they run
_PLACES = {"job.name", "job.class", "job.inputs", "job.output", "job.outputs",
           "kafka.bootstrap_servers", "coordinator.listen", "coordinator.url",
           "coordinator.token_file", "coordinator.processor_token_file",
           "processor.state_dir"}


def changed_settings(config_file: Path) -> dict[str, Any]:
    """"section.key" -> value, for every key of `config_file` whose value is not Baton's
    default, sorted."""
    raw = tomllib.loads(config_file.read_text())
    out: dict[str, Any] = {}
    for section, table in raw.items():
        if not isinstance(table, dict):
            continue
        model = _section_model(section)
        for key, value in table.items():
            name = f"{section}.{key}"
            if name in _PLACES:
                continue
            if model is None or key not in model.model_fields \
                    or model.model_fields[key].default != value:
                out[name] = value
    return dict(sorted(out.items()))


def _section_model(section: str) -> type[BaseModel] | None:
    field = Config.model_fields.get(section)
    model = field.annotation if field is not None else None
    return model if isinstance(model, type) and issubclass(model, BaseModel) \
        and section != "kafka" else None
