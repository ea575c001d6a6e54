"""The config keys an operator sets for production: fixed metrics ports per processor
and `[spark] conf` (with secrets), and every error of a config reported at once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire.config import ConfigError, parse_config


def raw(**sections: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {"job": {"name": "sums", "class": "processor.examples:RunningSum",
                                    "inputs": ["events"], "output": "sums"},
                            "kafka": {"bootstrap_servers": "127.0.0.1:9092"}}
    return {**base, **sections}


def test_metrics_port_per_processor_id() -> None:
    config = parse_config(raw(processor={"metrics_port": {"p1": 9101, "p2": 9102}}))
    assert config.processor.metrics_port_for("p2") == 9102
    assert config.processor.metrics_port_for("p9") == 0     # not listed: a free port
    assert parse_config(raw(processor={"metrics_port": 9100})).processor.metrics_port_for(
        "p1") == 9100


@pytest.mark.parametrize(("ports", "says"), [
    ({"p1": 9101, "p2": 9101}, "two processors share a port"),
    ({"p1": 70000}, "p1: 70000 is not a port"),
    (-1, "-1 is not a port"),
])
def test_bad_metrics_ports_name_the_key(ports: Any, says: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw(processor={"metrics_port": ports}), tmp_path / "job.toml")
    [problem] = caught.value.problems
    assert problem.startswith(f"{tmp_path / 'job.toml'}: processor.metrics_port: {says}")


def test_spark_conf_is_kept_as_is_with_secrets_resolved_and_masked(tmp_path: Path) -> None:
    secret = tmp_path / "spark.secret"
    secret.write_text("s3cret-value\n")
    os.chmod(secret, 0o600)
    config = parse_config(raw(spark={"master": "spark://10.0.0.1:7077", "conf": {
        "spark.driver.host": "10.0.0.2", "spark.authenticate": True,
        "spark.authenticate.secret": {"file": str(secret)}}}), tmp_path / "job.toml")
    assert config.spark.conf == {"spark.driver.host": "10.0.0.2", "spark.authenticate": True,
                                 "spark.authenticate.secret": "s3cret-value"}
    assert "s3cret-value" not in repr(config)
    assert config.mask("failed with s3cret-value") == "failed with [redacted]"


def test_every_error_is_reported_each_naming_its_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw(processor={"on_error": "retry", "comit_interval_ms": 5},
                         spark={"conf": {"spark.authenticate.secret": {"env": "NOPE_X"}}},
                         coordinator={"url": "ftp://x"}), tmp_path / "job.toml",
                     environ={})
    keys = [line.split(": ")[1] for line in caught.value.problems]
    assert sorted(keys) == ["coordinator.url", "processor.comit_interval_ms",
                            "processor.on_error", "spark.conf.spark.authenticate.secret"]
    assert str(caught.value).splitlines() == caught.value.problems


def test_a_value_of_no_accepted_form_is_one_line_naming_the_forms() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw(processor={"metrics_port": "ninety"}))
    [problem] = caught.value.problems
    assert problem.startswith("<memory>: processor.metrics_port: expected a number: ")
    assert "; or a table: " in problem


def test_forgetting_and_bind_retries_default_to_never_and_30_s() -> None:
    config = parse_config(raw())
    assert config.coordinator.forget_dead_after_ms == 0
    assert config.coordinator.bind_timeout_ms == config.processor.bind_timeout_ms == 30000
    set_ = parse_config(raw(coordinator={"forget_dead_after_ms": 86_400_000,
                                         "bind_timeout_ms": 0},
                            processor={"bind_timeout_ms": 5000}))
    assert set_.coordinator.forget_dead_after_ms == 86_400_000
    assert (set_.coordinator.bind_timeout_ms, set_.processor.bind_timeout_ms) == (0, 5000)


@pytest.mark.parametrize(("section", "key", "value"), [
    ("coordinator", "forget_dead_after_ms", -1),
    ("coordinator", "forget_dead_after_ms", "a day"),
    ("coordinator", "bind_timeout_ms", -5),
    ("processor", "bind_timeout_ms", 1.5),
])
def test_bad_forget_and_bind_settings_name_the_key_and_file(
        section: str, key: str, value: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw(**{section: {key: value}}), tmp_path / "job.toml")
    [problem] = caught.value.problems
    assert problem.startswith(f"{tmp_path / 'job.toml'}: {section}.{key}: "), problem

