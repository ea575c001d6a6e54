"""The job's own code on the Spark bulk path (real broker, Spark, RocksDB): a job
package outside the repository, named by `[job] path`, is shipped to the executors as a
zip (their Python workers do not share the driver's sys.path), and its key and value
formats are applied there as on the consumer path."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from processor.job import Record, load_job
from processor.jobspec import JobSpec
from processor.spark.bulk import bulk_catch_up
from processor.spark.code import JobCodeError, ship_job_code, zip_directory
from processor.spark.ingest import ingest_bulk
from processor.testing import run_job
from store import TaskStore

pytestmark = [pytest.mark.spark, pytest.mark.integration]

_JOB = '''
from processor import Job


class Counts(Job):
    """Counts per str key the JSON values' "n"; notes where its module was loaded from."""

    def process(self, record, state):
        entry = state.get(record.key, {"n": 0})
        entry["n"] += record.value["n"]
        entry["from"] = __file__
        state[record.key] = entry
        yield record.key, entry
'''


def _package(tmp_path: Path) -> tuple[Path, str]:
    """A job package in its own directory outside the repository, a unique name."""
    name = f"outside_{uuid.uuid4().hex[:8]}"
    root = tmp_path / "code"
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(textwrap.dedent(_JOB))
    return root, f"{name}:Counts"


@pytest.mark.parametrize("plan", ["local", "shuffle"])
def test_a_job_outside_the_repository_runs_on_the_executors(spark, broker, unique,
                                                            tmp_path: Path, plan: str) -> None:
    root, class_path = _package(tmp_path)
    topic = broker.create_topic(unique("events"), 1)
    producer = broker.producer()
    sent = []
    for i in range(30):
        key, value = b"k%d" % (i % 3), b'{"n": %d}' % i
        producer.produce(topic, key=key, value=value)
        sent.append(Record(key, value, topic, 0, i, 0))
    producer.flush(30)
    spec = JobSpec(class_path, "job", path=(str(root),), key_format="str",
                   value_format="json")
    result = bulk_catch_up(spark, spec, broker.settings(), {f"{topic}:0": (0, 30)}, "input",
                           "Partition 0", plan=plan)    # type: ignore[arg-type]
    with TaskStore(tmp_path / "bulk") as store:
        ingest_bulk(store, result)
        folded: dict[Any, Any] = dict(store.items())
    assert {k: v["n"] for k, v in folded.items()} == {
        "k0": sum(range(0, 30, 3)), "k1": sum(range(1, 30, 3)), "k2": sum(range(2, 30, 3))}
    # loaded on the executors from the shipped zip, not from the directory
    assert all(".zip" in v["from"] and "baton-job-code-" in v["from"]
               for v in folded.values())
    expected = run_job(load_job(class_path, [root]), sent, key_format="str",
                       value_format="json").state
    assert {k: v["n"] for k, v in expected.items()} == {k: v["n"] for k, v in folded.items()}


def test_a_missing_directory_is_named(spark, tmp_path: Path) -> None:
    with pytest.raises(JobCodeError, match=f"job.path {tmp_path / 'nope'}: not a directory"):
        ship_job_code(spark.sparkContext, [tmp_path / "nope"])


def test_the_zip_is_named_by_its_contents(tmp_path: Path) -> None:
    root, _ = _package(tmp_path)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.pyc").write_bytes(b"\0")
    first = zip_directory(root, tmp_path)
    assert zip_directory(root, tmp_path) == first
    (root / "added_module").with_suffix(".py").write_text("X = 1\n")
    second = zip_directory(root, tmp_path)
    assert second != first
    import zipfile

    assert sorted(zipfile.ZipFile(second).namelist()) == sorted(
        [p.relative_to(root).as_posix() for p in root.rglob("*.py")])
