"""The scenario document (orchestrator/cli/scenario.py) and `baton assign`
(orchestrator/cli/assign.py): the pinned JSON, the table, the errors naming the file
and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator.cli.assign import assign_command
from orchestrator.cli.scenario import (
    Scenario,
    ScenarioError,
    format_assignment,
    format_scenario,
    parse_scenario,
    scenario_from_json,
)
from orchestrator.core.assignment import (
    AssignmentConfig,
    ProcessorSnapshot,
    TaskInfo,
    assign,
)

# --- the scenario document and `baton assign` ------------------------------------------------

SCENARIO = {
    "tasks": [{"name": "a"}, {"name": "b", "stateful": True}, {"name": "c", "stateful": False},
              {"name": "d"}],
    "processors": [
        {"id": "p1", "capacity": 1, "active": ["a", "b", "c", "d"], "standby": [], "lags": {}},
        {"id": "p2", "active": [], "standby": ["a"], "lags": {"a": 10, "b": 5000}},
    ],
    "config": {"acceptable_lag": 1000, "max_warmups": 2, "num_standbys": 1},
}


def write(tmp_path: Path, data: object, name: str = "scenario.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_parse_scenario_applies_defaults() -> None:
    scenario = parse_scenario({"tasks": [{"name": "a"}], "processors": [{"id": "p1"}]})
    assert scenario == Scenario((TaskInfo("a"),), (ProcessorSnapshot("p1"),), AssignmentConfig())


def test_format_scenario_round_trips() -> None:
    scenario = parse_scenario(SCENARIO)
    assert parse_scenario(json.loads(json.dumps(format_scenario(scenario)))) == scenario
    assert scenario_from_json(json.dumps(SCENARIO)) == scenario


def test_cli_json_prints_the_pinned_document(tmp_path: Path) -> None:
    out = CliRunner().invoke(assign_command, ["--scenario", str(write(tmp_path, SCENARIO)),
                                              "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {
        "processors": [
            {"id": "p1", "active": ["b", "d"], "warmup": [], "standby": ["a"]},
            {"id": "p2", "active": ["a", "c"], "warmup": [], "standby": ["b", "d"]},
        ],
        "follow_up": False,
    }
    scenario = parse_scenario(SCENARIO)
    assert json.loads(out.output) == format_assignment(
        assign(scenario.tasks, scenario.processors, scenario.config))


def test_cli_human_output_has_a_table_and_the_moves(tmp_path: Path) -> None:
    data = {"tasks": [{"name": "x"}, {"name": "y"}],
            "processors": [{"id": "p1", "active": ["x", "y"]}, {"id": "p2"}]}
    out = CliRunner().invoke(assign_command, ["--scenario", str(write(tmp_path, data))])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert any(line.split()[:3] == ["p1", "1", "2"] for line in lines)
    assert "warmup  x  on p2, active stays on p1  (lag unknown)" in out.output
    assert "moves: 0 active now, 0 new or orphaned placed, 1 warming up" in out.output
    assert "follow-up: yes" in out.output


def test_cli_reads_standard_input() -> None:
    out = CliRunner().invoke(assign_command, ["--scenario", "-", "--json"],
                             input=json.dumps(SCENARIO))
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["follow_up"] is False


def broken(**change: object) -> dict[str, object]:
    """SCENARIO with ``a__0__b=value`` set (``KeyError``: deleted)."""
    data: dict[str, object] = json.loads(json.dumps(SCENARIO))
    for path, value in change.items():
        *parents, last = path.split("__")
        node: Any = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is KeyError:
            del node[int(last) if isinstance(node, list) else last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return data


@pytest.mark.parametrize(("data", "field"), [
    (broken(tasks__0__name=KeyError), "tasks[0].name"),
    (broken(processors__1__id=KeyError), "processors[1].id"),
    (broken(tasks=KeyError), "tasks: missing required key"),
    (broken(processors__0__capacity="2"), "processors[0].capacity"),
    (broken(processors__0__capacity=0), "processors[0].capacity"),
    (broken(tasks__2__stateful="no"), "tasks[2].stateful"),
    (broken(processors__1__lags={"a": -1}), "processors[1].lags.a"),
    (broken(processors__1__lags={"zz": 1}), "processors[1].lags: unknown task 'zz'"),
    (broken(processors__0__active=["a", "nope"]), "processors[0].active[1]: unknown task"),
    (broken(processors__1__standby=["ghost"]), "processors[1].standby[0]: unknown task"),
    (broken(processors__1__active=["b"]),
     "processors[1].active: task 'b' is already active on 'p1'"),
    (broken(processors__1__active=["a"]), "processors[1].standby[0]: task 'a' is also active"),
    (broken(processors__1__id="p1"), "processors[1].id: duplicate processor id"),
    (broken(tasks__3__name="a"), "tasks[3].name: duplicate task"),
    (broken(processors__1__standby=["b", "b"]), "processors[1].standby[1]"),
    (broken(config__max_warmups=0), "config.max_warmups"),
    (broken(config__max_warmup=3), "config.max_warmup: unknown key"),
    (broken(config=[]), "config: expected a JSON object"),
    ([], "scenario: expected a JSON object"),
    ("{\"tasks\": [", "line 1 column 12: invalid JSON"),
])
def test_cli_errors_exit_2_naming_the_file_and_the_field(tmp_path: Path, data: object,
                                                        field: str) -> None:
    path = write(tmp_path, data)
    out = CliRunner().invoke(assign_command, ["--scenario", str(path)])
    assert out.exit_code == 2, out.output
    assert str(path) in out.output and field in out.output


def test_cli_missing_file_exits_2_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "missing.json"
    out = CliRunner().invoke(assign_command, ["--scenario", str(path)])
    assert out.exit_code == 2
    assert str(path) in out.output and "No such file" in out.output


def test_scenario_error_has_the_path() -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"tasks": [], "processors": [{"id": 3}]})
    assert info.value.path == "processors[0].id"


def test_assign_is_a_baton_command(tmp_path: Path) -> None:
    from orchestrator.cli import main

    out = CliRunner().invoke(main, ["assign", "--scenario", str(write(tmp_path, SCENARIO)),
                                    "--json"])
    assert out.exit_code == 0, out.output


def test_assign_cli_moves_a_task_off_a_restoring_owner(tmp_path: Path) -> None:
    data = {"tasks": [{"name": "t0"}, {"name": "t1"}],
            "processors": [{"id": "p1", "active": ["t0"], "lags": {"t0": 500}},
                           {"id": "p2", "active": ["t1"], "lags": {"t0": 0}}],
            "config": {"acceptable_lag": 100}}
    run = CliRunner().invoke(assign_command, ["--scenario", str(write(tmp_path, data)),
                                              "--json"])
    assert run.exit_code == 0, run.output
    owners = {p["id"]: p["active"] for p in json.loads(run.output)["processors"]}
    assert "t0" in owners["p2"], owners
