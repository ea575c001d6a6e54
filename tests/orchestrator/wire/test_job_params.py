"""`[job.params]`: the job's own settings, read from the config file as a table."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.wire.config import ConfigError, load_config

_JOB = '''[job]
name = "sums"
class = "processor.examples:RunningSum"
inputs = ["events"]
output = "sums"
'''


def test_a_params_table_reaches_the_job_config(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(_JOB + '\n[job.params]\ntag = "eu"\nthreshold = 10\n'
                    'weights = { a = 1.5 }\n')
    assert load_config(path).job.params == {"tag": "eu", "threshold": 10,
                                            "weights": {"a": 1.5}}


def test_no_params_is_an_empty_table(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(_JOB)
    assert load_config(path).job.params == {}


def test_params_that_are_not_a_table_are_named_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(_JOB.replace('output = "sums"\n', 'output = "sums"\nparams = 3\n'))
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert "job.params" in str(raised.value) and str(path) in str(raised.value)
