"""`BATON_<SECTION>__<KEY>` variables over the config file: what they set, how they are
validated and named in errors, and what stays secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire.config import ConfigError, parse_config
from orchestrator.wire.environment import env_name

FILE = Path("/etc/baton/job.toml")


def raw() -> dict[str, Any]:
    return {"job": {"name": "sums", "class": "processor.examples:RunningSum",
                    "inputs": ["events"], "output": "sums"},
            "kafka": {"bootstrap_servers": "kafka-0:9092"},
            "processor": {"state_dir": "/srv/state", "heartbeat_interval_ms": 1000}}


def errors(environ: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw(), FILE, environ)
    return caught.value.problems


def test_the_environment_wins_over_the_file_and_is_read_as_the_file_would_be() -> None:
    config = parse_config(raw(), FILE, {
        "BATON_PROCESSOR__STATE_DIR": "/var/lib/baton",
        "BATON_PROCESSOR__HEARTBEAT_INTERVAL_MS": "250",
        "BATON_PROCESSOR__METRICS_HOST": "10.0.0.5",
        "BATON_COORDINATOR__LISTEN": "10.0.0.2:8700",
        "BATON_COORDINATOR__URL": '["http://10.0.0.2:8700", "http://10.0.0.3:8700"]',
        "BATON_CATCH_UP__ACCEPTABLE_LAG": "50",
        "BATON_JOB__PARAMS": "{ limit = 5 }",
        "BATON_TEST_BROKER": "kafka",        # one underscore: not a setting
    })
    assert config.processor.state_dir == "/var/lib/baton"
    assert config.state_dir == Path("/var/lib/baton")
    assert config.processor.heartbeat_interval_ms == 250
    assert config.processor.metrics_host == "10.0.0.5"
    assert config.coordinator.listen == "10.0.0.2:8700"
    assert config.coordinator.urls == ["http://10.0.0.2:8700", "http://10.0.0.3:8700"]
    assert config.catch_up.acceptable_lag == 50
    assert config.job.params == {"limit": 5}
    assert config.sources == {
        "processor.state_dir": "BATON_PROCESSOR__STATE_DIR",
        "processor.heartbeat_interval_ms": "BATON_PROCESSOR__HEARTBEAT_INTERVAL_MS",
        "processor.metrics_host": "BATON_PROCESSOR__METRICS_HOST",
        "coordinator.listen": "BATON_COORDINATOR__LISTEN",
        "coordinator.url": "BATON_COORDINATOR__URL",
        "catch_up.acceptable_lag": "BATON_CATCH_UP__ACCEPTABLE_LAG",
        "job.params": "BATON_JOB__PARAMS"}
    assert parse_config(raw(), FILE, {}).sources == {}


def test_a_key_inside_a_table_and_a_section_the_file_lacks() -> None:
    config = parse_config(raw(), FILE, {"BATON_JOB__PARAMS__REGION": "eu",
                                        "BATON_SPARK__MASTER": "spark://10.0.0.10:7077"})
    assert config.job.params == {"region": "eu"}
    assert config.spark.master == "spark://10.0.0.10:7077"


def test_kafka_keys_are_librdkafka_names_and_their_values_are_secret() -> None:
    config = parse_config(raw(), FILE, {"BATON_KAFKA__SASL_PASSWORD": "hunter2",
                                        "BATON_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
                                        "BATON_KAFKA__BOOTSTRAP_SERVERS": "kafka-1:9092"})
    assert config.kafka_settings()["sasl.password"] == "hunter2"
    assert config.kafka_settings()["security.protocol"] == "SASL_SSL"
    assert config.kafka_settings()["bootstrap.servers"] == "kafka-1:9092"
    shown = config.shown_kafka_settings()
    assert "hunter2" not in repr(shown) and "SASL_SSL" not in repr(shown)
    assert config.mask("login failed for hunter2") == "login failed for [redacted]"
    assert "hunter2" not in repr(config)
    assert config.sources["kafka.sasl.password"] == "BATON_KAFKA__SASL_PASSWORD"


def test_spark_conf_comes_whole_and_secret() -> None:
    config = parse_config(raw(), FILE, {
        "BATON_SPARK__CONF": '{ "spark.driver.host" = "10.0.0.21" }'})
    assert config.spark.conf == {"spark.driver.host": "10.0.0.21"}
    assert "10.0.0.21" in config.secret_values()
    assert any("give the whole table" in e
               for e in errors({"BATON_SPARK__CONF__SPARK_DRIVER_HOST": "10.0.0.21"}))


def test_every_bad_variable_is_reported_at_once_naming_file_key_and_variable() -> None:
    found = errors({"BATON_PROCESSOR__HEARTBEAT_INTERVAL_MS": "soon",
                    "BATON_PROCESOR__STATE_DIR": "/x",
                    "BATON_PROCESSOR__STAT_DIR": "/x",
                    "BATON_JOB__INPUTS": '["a", ',
                    "BATON_PROCESSOR__STATE_DIR__INNER": "/x"})
    assert len(found) == 5, found
    assert all(line.startswith(f"{FILE}: ") for line in found)
    text = "\n".join(found)
    assert ("processor.heartbeat_interval_ms (from BATON_PROCESSOR__HEARTBEAT_INTERVAL_MS): "
            "Input should be a valid integer") in text
    assert "BATON_PROCESOR__STATE_DIR: no section [procesor]" in text
    assert "processor.stat_dir (from BATON_PROCESSOR__STAT_DIR): unknown key" in text
    assert "BATON_JOB__INPUTS: a value starting with [ or { is a TOML list" in text
    assert "BATON_PROCESSOR__STATE_DIR__INNER: processor.state_dir is not a table" in text


def test_a_rule_across_keys_holds_for_values_from_the_environment() -> None:
    found = errors({"BATON_COORDINATOR__TLS_CERT_FILE": "/etc/baton/c.pem"})
    assert any("tls_cert_file and coordinator.tls_key_file go together" in e for e in found)


@pytest.mark.parametrize(("key", "name"), [
    ("processor.state_dir", "BATON_PROCESSOR__STATE_DIR"),
    ("catch_up.acceptable_lag", "BATON_CATCH_UP__ACCEPTABLE_LAG"),
    ("job.params.limit", "BATON_JOB__PARAMS__LIMIT"),
    ("kafka.sasl.password", "BATON_KAFKA__SASL_PASSWORD"),
    ("kafka.bootstrap_servers", "BATON_KAFKA__BOOTSTRAP_SERVERS"),
])
def test_env_name_is_the_variable_that_sets_a_key(key: str, name: str) -> None:
    assert env_name(key) == name
    assert key in parse_config(raw(), FILE, {name: "1"}).sources
