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
        folded: dict[Any, Any] = dict(store.state.items())
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


def test_a_process_zips_into_a_private_directory_that_goes_when_it_exits(
        tmp_path: Path) -> None:
    import subprocess
    import sys

    root, _ = _package(tmp_path)
    script = ("import os, sys\n"
              "from pathlib import Path\n"
              "from processor.spark.code import code_directory, zip_directory\n"
              "into = code_directory()\n"
              "assert code_directory() == into\n"
              "archive = zip_directory(Path(sys.argv[1]), into)\n"
              "print(into, oct(into.stat().st_mode & 0o777), archive.parent == into)\n")
    run = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    directory, mode, inside = run.stdout.split()
    assert (mode, inside) == ("0o700", "True")
    assert Path(directory).name.startswith("baton-job-code-")
    assert not Path(directory).exists()


# a driver on the standalone cluster: the job package is on no worker's path, so its
# code reaches the executors only as the shipped zip
_CLUSTER_DRIVER = r"""
import json, os, sys, time
from pathlib import Path
from processor.jobspec import JobSpec
from processor.spark import spark_session
from processor.spark.bulk import bulk_catch_up

args = json.loads(sys.argv[1])
spark = spark_session(args["master"])
sc = spark.sparkContext
deadline = time.monotonic() + 60
while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:  # two executors + the driver
    assert time.monotonic() < deadline, "the two workers' executors did not register"
    time.sleep(0.2)
spec = JobSpec(args["job"], "job", path=(args["root"],), key_format="str",
               value_format="json")
result = bulk_catch_up(spark, spec, args["settings"], args["ranges"], "input",
                       "Partition 0", directory=Path(args["out"]), chunk_records=10)
print(json.dumps({"paths": [str(p) for p in result.sst_paths], "offsets": result.offsets,
                  "records": result.records, "driver": os.getpid()}))
spark.stop()
"""


def test_a_job_outside_the_repository_runs_on_a_standalone_cluster(
        broker, unique, tmp_path: Path, standalone_cluster) -> None:
    import json
    import subprocess
    import sys

    root, class_path = _package(tmp_path)
    topic = broker.create_topic(unique("events"), 2)
    producer = broker.producer()
    sent: dict[int, list[Record]] = {0: [], 1: []}
    for i in range(60):
        partition, key, value = i % 2, b"k%d" % (i % 4), b'{"n": %d}' % i
        producer.produce(topic, key=key, value=value, partition=partition)
        sent[partition].append(Record(key, value, topic, partition, i // 2, 0))
    producer.flush(30)
    out = tmp_path / "driver-files"
    args = {"master": standalone_cluster.master, "job": class_path, "root": str(root),
            "settings": broker.settings(), "out": str(out),
            "ranges": {f"{topic}:{p}": (0, 30) for p in (0, 1)}}
    run = subprocess.run([sys.executable, "-c", _CLUSTER_DRIVER, json.dumps(args)],
                         env=standalone_cluster.env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=240, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["records"] == 60
    assert report["offsets"] == {f"{topic}:{p}": 30 for p in (0, 1)}
    with TaskStore(tmp_path / "bulk") as store:
        store.ingest([Path(p) for p in report["paths"]])
        folded: dict[Any, Any] = dict(store.state.items())
    # loaded by the workers' executors from the shipped zip
    assert folded and all(".zip" in v["from"] and "baton-job-code-" in v["from"]
                          for v in folded.values())
    job = load_job(class_path, [root])
    expected = run_job(job, sent[0] + sent[1], key_format="str", value_format="json").state
    assert {k: v["n"] for k, v in folded.items()} == {k: v["n"] for k, v in expected.items()}
