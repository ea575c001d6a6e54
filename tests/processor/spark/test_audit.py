"""`baton audit` on a real broker and real Spark: planted duplicates, gaps and wrong values."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator.cli.audit import audit_command
from orchestrator.wire.config import dump_config
from processor.examples import RunningSum
from processor.job import Record
from processor.spark.audit import compare_sequences

Output = tuple[bytes, str]


def _input_and_correct_output(broker: Any, topic: str) -> list[Output]:
    """Produce keyed input; compute what a single processor outputs (offset order)."""
    rng = random.Random(5)
    producer = broker.producer()
    for _ in range(1200):
        producer.produce(topic, key=f"k{rng.randrange(60)}".encode(),
                         value=str(rng.randint(1, 9)).encode())
    assert producer.flush(30) == 0
    job, state, out = RunningSum(), {}, []
    for msg in broker.read_all(topic):
        record = Record(msg.key(), msg.value(), msg.topic(), msg.partition(), msg.offset(), 0)
        out.extend(job.process(record, state))
    assert len(out) == 1200
    return out


def _write(broker: Any, topic: str, outputs: list[Output], aborted: list[Output]) -> None:
    """Outputs in transactions, as a processor writes them; `aborted` goes in an aborted one."""
    producer = broker.producer(**{"transactional.id": f"audit-{topic}"})
    producer.init_transactions(30)
    half = len(outputs) // 2
    for batch, garbage in ((outputs[:half], []), ([], aborted), (outputs[half:], [])):
        producer.begin_transaction()
        for key, value in [*batch, *garbage]:
            producer.produce(topic, key=key, value=value)
        if garbage:
            producer.flush(30)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)


def _audit(raw: dict[str, Any], path: Path, *args: str) -> Any:
    path.write_text(dump_config(raw), encoding="utf-8")
    return CliRunner().invoke(audit_command, ["-c", str(path), *args])


@pytest.mark.spark
@pytest.mark.integration
def test_audit_finds_planted_duplicates_gaps_and_wrong_values(spark, broker, job_config,
                                                              tmp_path) -> None:
    raw = job_config(partitions=3, spark={"master": "local[2]"})
    correct = _input_and_correct_output(broker, raw["job"]["inputs"][0])
    dup_key = correct[100][0]
    planted = {
        "ok": correct,
        "duplicate": [*correct[:700], correct[100], *correct[700:]],
        "gap": correct[:500] + correct[501:],
        "wrong": correct[:300] + [(correct[300][0], "-1")] + correct[301:],
    }
    expected = {
        "ok": (0, 0, 0, 0), "duplicate": (1, 0, 1, 0), "gap": (1, 1, 0, 0),
        "wrong": (1, 1, 0, 1),
    }
    for case, outputs in planted.items():
        raw["job"]["output"] = broker.create_topic(f"{raw['job']['name']}-{case}", 3)
        _write(broker, raw["job"]["output"], outputs, aborted=correct[:50])
        result = _audit(raw, tmp_path / f"{case}.toml", "--json")
        report = json.loads(result.output)
        assert result.exit_code == (0 if case == "ok" else 1), (case, result.output)
        got = (report["differing"], report["missing"], report["duplicated"], report["wrong"])
        assert got == expected[case], (case, report)
        assert report["ok"] is (case == "ok")
        assert report["keys"] == 60 and report["expected"] == 1200
        assert report["actual"] == len(outputs)  # the aborted transaction is not read
        if case == "duplicate":
            (example,) = report["examples"]
            assert example["key"] == dup_key.decode()
            assert example["actual"] == example["expected"] + 1
    human = _audit(raw, tmp_path / "human.toml")
    assert human.exit_code == 1
    assert "DIFFERENT: 1 keys differ" in human.output and "missing" in human.output


@pytest.mark.spark
@pytest.mark.integration
def test_audit_of_a_job_with_two_inputs(spark, broker, job_config, tmp_path) -> None:
    """Keys span both inputs: the audit folds each key over them in input order."""
    raw = job_config(partitions=2, spark={"master": "local[2]"})
    first = raw["job"]["inputs"][0]
    second = broker.create_topic(f"{first}-b", 2)
    raw["job"]["inputs"].append(second)
    producer = broker.producer()
    for topic in (first, second):
        for i in range(200):
            producer.produce(topic, key=f"k{i % 10}".encode(), value=b"%d" % (i % 7 + 1))
    assert producer.flush(30) == 0
    job, state, outputs = RunningSum(), {}, []
    for topic in (first, second):  # the audit's order: input order, then partition, offset
        for msg in broker.read_all(topic):
            record = Record(msg.key(), msg.value(), topic, msg.partition(), msg.offset(), 0)
            outputs.extend(job.process(record, state))
    _write(broker, raw["job"]["output"], outputs, aborted=[])
    result = _audit(raw, tmp_path / "two.toml", "--json")
    report = json.loads(result.output)
    assert result.exit_code == 0, report
    assert report["keys"] == 10 and report["expected"] == report["actual"] == 400


@pytest.mark.integration
def test_bad_config_exits_2_naming_file_and_key(tmp_path, job_config) -> None:
    raw = job_config(partitions=1)
    raw["job"]["grouping"] = "sideways"
    result = _audit(raw, tmp_path / "bad.toml")
    assert result.exit_code == 2
    assert "bad.toml" in result.output and "job.grouping" in result.output
    raw["job"]["grouping"] = "partition"
    raw["job"]["class"] = "nowhere.jobs:Missing"
    result = _audit(raw, tmp_path / "bad-class.toml", "--json")
    assert result.exit_code == 2
    assert "bad-class.toml: job.class" in json.loads(result.output.splitlines()[0])["error"]


@pytest.mark.parametrize(("expected", "actual", "counts"), [
    ([b"1", b"3"], [b"1", b"3"], (0, 0, 0, -1)),
    ([b"1", b"3"], [b"1", b"3", b"3"], (0, 1, 0, 2)),
    ([b"1", b"3", b"6"], [b"1", b"6"], (1, 0, 0, 1)),
    ([b"1", b"3"], [b"1", b"9"], (1, 0, 1, 1)),
    ([b"1", b"3"], [b"3", b"1"], (0, 0, 0, 0)),
])
def test_compare_sequences(expected, actual, counts) -> None:
    assert compare_sequences(expected, actual) == counts
