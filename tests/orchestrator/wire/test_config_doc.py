"""docs/configuration.md is what the config models say: regenerate it and compare, so a
key added, renamed or re-described without regenerating fails here."""

from __future__ import annotations

import re
import tomllib

from orchestrator.wire.config import Config, parse_config
from orchestrator.wire.config_doc import DOC, main, missing_descriptions, render


def test_the_reference_matches_the_models() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md differs from the models: run "
        "python -m orchestrator.wire.config_doc")
    assert main(["--check"]) == 0


def test_every_key_has_a_description() -> None:
    assert missing_descriptions() == []


def test_every_section_and_key_is_in_the_reference() -> None:
    text = render()
    for section, field in Config.model_fields.items():
        if section in ("path", "secret_keys", "sources"):
            continue
        assert f"## [{section}]" in text
        model = field.annotation
        for name, key in getattr(model, "model_fields", {}).items():
            if name != "secret_keys":
                assert f"| `{key.alias or name}` |" in text, (section, name)


def test_the_complete_job_toml_is_a_valid_config_with_the_defaults() -> None:
    block = re.search(r"```toml\n(.*?)```", render(), re.S)
    assert block is not None
    config = parse_config(tomllib.loads(block.group(1)))
    defaults = parse_config({"job": {"name": "sums", "class": "processor.examples:RunningSum",
                                     "inputs": ["events"], "output": "sums"},
                             "kafka": {"bootstrap_servers": "127.0.0.1:9092"}})
    assert config.model_dump(exclude={"path"}) == defaults.model_dump(exclude={"path"})
