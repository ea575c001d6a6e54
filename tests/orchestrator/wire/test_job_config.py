"""The job author's `[job]` keys: further output topics, key and value formats, and the
directories of the job's code; each error names the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire.config import ConfigError, JobConfig, parse_config
from orchestrator.wire.job_config import JobConfig as OwnModule


def _raw(**job: Any) -> dict[str, Any]:
    return {"job": {"name": "sums", "class": "processor.examples:RunningSum",
                    "inputs": ["events"], "output": "sums", **job},
            "kafka": {"bootstrap_servers": "127.0.0.1:9092"}}


def _problems(tmp_path: Path, **job: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(_raw(**job), tmp_path / "job.toml")
    return caught.value.problems


def test_the_job_section_is_importable_from_config() -> None:
    assert JobConfig is OwnModule


def test_defaults_keep_the_pinned_job() -> None:
    job = parse_config(_raw()).job
    assert (job.outputs, job.key_format, job.value_format, job.path) == (
        [], "bytes", "bytes", [])
    assert job.output_topics == ("sums",)


def test_outputs_come_after_output_once_each() -> None:
    job = parse_config(_raw(outputs=["alerts", "sums", "audit"])).job
    assert job.output_topics == ("sums", "alerts", "audit")


@pytest.mark.parametrize(("outputs", "says"), [
    (["a", "a"], "distinct, non-empty"),
    ([""], "distinct, non-empty"),
    (["events"], "also an input"),
])
def test_bad_outputs_name_the_key(tmp_path: Path, outputs: list[str], says: str) -> None:
    [problem] = _problems(tmp_path, outputs=outputs)
    assert problem.startswith(f"{tmp_path / 'job.toml'}: job") and says in problem


def test_formats_are_bytes_str_or_json(tmp_path: Path) -> None:
    job = parse_config(_raw(key_format="str", value_format="json")).job
    assert (job.key_format, job.value_format) == ("str", "json")
    [problem] = _problems(tmp_path, value_format="avro")
    assert "job.value_format" in problem and "'json'" in problem


def test_path_is_one_directory_or_several_relative_to_the_file(tmp_path: Path) -> None:
    config = parse_config(_raw(path="../jobs"), tmp_path / "conf" / "job.toml")
    assert config.job.path == ["../jobs"]
    assert config.job_path == [tmp_path / "conf" / ".." / "jobs"]
    several = parse_config(_raw(path=["a", "/opt/jobs"]), tmp_path / "job.toml")
    assert several.job_path == [tmp_path / "a", Path("/opt/jobs")]
    [problem] = _problems(tmp_path, path=[""])
    assert "job.path" in problem
