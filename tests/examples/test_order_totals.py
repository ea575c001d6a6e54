"""The example job of examples/order_totals: its job class on the in-memory harness, and
its job.toml run by a coordinator and a processor on the broker, as its header says, the
job's code found through `[job] path` (no PYTHONPATH). tests/test_quick_start.py runs the
README's quick start, which copies the job to a directory of its own."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire.config import dump_config, load_config
from processor.job import load_job
from processor.testing import JobHarness, run_job
from tests.daemon_support import wait_for_coordinator
from tests.waiting import wait_for

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "order_totals"


@pytest.fixture
def order_totals(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The job class, imported the way its job.toml names it (its directory on the path)."""
    config = load_config(EXAMPLE / "job.toml")
    for directory in reversed(config.job_path):
        monkeypatch.syspath_prepend(str(directory))
    return load_job(config.job.class_)


def test_the_readme_shows_the_example_as_shipped() -> None:
    readme = (EXAMPLE.parents[1] / "README.md").read_text()
    source = (EXAMPLE / "order_totals.py").read_text()
    job = source[source.index("class OrderTotals"):].strip()
    assert job in readme
    config = (EXAMPLE / "job.toml").read_text()
    for section in ("[job]", "[job.params]"):
        block = config[config.index(section):].split("\n\n")[0]
        assert block in readme, block


def test_the_example_config_is_valid_and_names_its_class() -> None:
    config = load_config(EXAMPLE / "job.toml")
    assert config.job.class_ == "order_totals:OrderTotals"
    assert config.job_path == [EXAMPLE]                # its code: beside the file
    assert "PYTHONPATH" not in (EXAMPLE / "job.toml").read_text()
    assert config.job.params == {"big_order": 100}


def test_totals_per_customer_on_the_harness(order_totals: Any) -> None:
    run = run_job(order_totals, [("ann", "30"), ("bob", "120"), ("ann", "12.5")],
                  params={"big_order": 100}, commit_every=2)
    assert [json.loads(o.value) for o in run.outputs] == [
        {"orders": 1, "total": 30.0, "big": False},
        {"orders": 1, "total": 120.0, "big": True},
        {"orders": 2, "total": 42.5, "big": False}]
    assert run.state == {b"ann": {"orders": 2, "total": 42.5},
                         b"bob": {"orders": 1, "total": 120.0}}


def test_a_bad_amount_is_undone_under_skip(order_totals: Any) -> None:
    with JobHarness(order_totals, params={}, on_error="skip") as harness:
        harness.send(("ann", "10"))
        assert harness.send(("ann", "ten")) == []          # raised: its writes undone
        assert harness.state == {b"ann": {"orders": 1, "total": 10.0}}


@pytest.mark.integration
def test_the_example_runs_as_a_job(broker: Any, unique: Any, daemons: Any,
                                   tmp_path: Path) -> None:
    from orchestrator.devkit.embedded import free_port

    raw = tomllib.loads((EXAMPLE / "job.toml").read_text())
    port = free_port()
    raw["job"].update(name=unique("orders"), inputs=[broker.create_topic(unique("orders"), 2)],
                      output=broker.create_topic(unique("totals"), 2),
                      path=[str(EXAMPLE)])            # "." was beside the example's file
    raw["kafka"] = broker.kafka_table()
    raw["coordinator"] = {"listen": f"127.0.0.1:{port}", "url": f"http://127.0.0.1:{port}",
                          "token_file": str(tmp_path / "coordinator.token")}
    raw["processor"] = {"state_dir": str(tmp_path / "state"), "heartbeat_interval_ms": 200,
                        **broker.processor_table()}
    raw["catch_up"] = broker.catch_up_table()
    path = tmp_path / "job.toml"
    path.write_text(dump_config(raw))                 # [job] params as an inline table
    config = load_config(path)
    coordinator = daemons("coordinator", "coordinator", "-c", path)
    wait_for_coordinator(config, coordinator)
    daemons("p1", "processor", "-c", path, "--id", "p1")
    producer = broker.producer()
    orders = [(f"c{i % 5}", str(10 * (i % 13))) for i in range(100)]
    for key, value in orders:
        producer.produce(config.job.inputs[0], key=key, value=value)
    producer.flush(30)
    del producer
    wait_for(lambda: len(broker.read_all(config.job.output)) == len(orders), 120,
             "an output per order")
    last: dict[bytes, Any] = {}
    for message in broker.read_all(config.job.output):
        last[message.key()] = json.loads(message.value())
    for customer in {key for key, _ in orders}:
        amounts = [float(v) for k, v in orders if k == customer]
        assert last[customer.encode()]["orders"] == len(amounts)
        assert last[customer.encode()]["total"] == round(sum(amounts), 2)
