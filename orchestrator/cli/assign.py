"""`baton assign`: run the assignor offline on a what-if scenario (pinned: docs/design.md).

The scenario document is the one ``orchestrator.cli.scenario.parse_scenario`` reads;
``--json`` prints exactly the pinned ``{"processors": [...], "follow_up": bool}``, the
human form a table of role counts (before -> after) and a summary of the moves. Every
bad scenario exits 2 with a message naming the file and the key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import click

from orchestrator.cli.conventions import epilog
from orchestrator.cli.scenario import Scenario, ScenarioError, format_assignment, scenario_from_json
from orchestrator.core.assignment import (
    Assignment,
    Move,
    ProcessorSnapshot,
    assign,
    owner_changes,
)

__all__ = ["assign_command"]


class _ScenarioFileError(click.ClickException):
    """A scenario Baton cannot use: exit 2, like every usage or configuration error."""

    exit_code = 2


def _load(path: str) -> Scenario:
    """Read and validate the scenario file ("-" reads standard input)."""
    try:
        with click.open_file(path, encoding="utf-8") as stream:
            text = stream.read()
    except OSError as exc:
        raise _ScenarioFileError(f"cannot read scenario {path}: "
                                 f"{exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise _ScenarioFileError(f"{path}: not UTF-8 text ({exc.reason} at byte "
                                 f"{exc.start}); expected a JSON scenario") from exc
    try:
        return scenario_from_json(text)
    except ScenarioError as exc:
        raise _ScenarioFileError(f"{path}: {exc}") from exc


def _table(scenario: Scenario, result: Assignment) -> list[str]:
    """One row per processor: capacity and role counts, active as before -> after."""
    before = {p.id: p for p in scenario.processors}
    rows = [("PROCESSOR", "CAPACITY", "ACTIVE", "WARMUP", "STANDBY")]
    for p in result.processors:
        old = before[p.id]
        rows.append((p.id, str(old.capacity), f"{len(old.active)} -> {len(p.active)}",
                     str(len(p.warmup)), f"{len(old.standby)} -> {len(p.standby)}"))
    width = [max(len(row[k]) for row in rows) for k in range(5)]
    return ["  ".join(cell.ljust(width[k]) if k == 0 else cell.rjust(width[k])
                      for k, cell in enumerate(row)).rstrip() for row in rows]


def _lag(proc: ProcessorSnapshot, task: str, stateful: bool = True) -> str:
    """A processor's lag on a task as the summary shows it."""
    lag = proc.lags.get(task)
    if not stateful:
        return "stateless"
    return "lag unknown" if lag is None else f"lag {lag} records"


def _summary(scenario: Scenario, result: Assignment, changes: Sequence[Move]) -> list[str]:
    """What changes: active moves, placements, warmups and standby churn, then follow-up."""
    procs = {p.id: p for p in scenario.processors}
    stateful = {t.name: t.stateful for t in scenario.tasks}
    owner = result.owners()
    moved = [m for m in changes if m.source is not None]
    placed = [m for m in changes if m.source is None]
    warmups = [(t, p.id) for p in result.processors for t in p.warmup]
    lines = [f"moves: {len(moved)} active now, {len(placed)} new or orphaned placed, "
             f"{len(warmups)} warming up"]
    lines += [f"  move    {m.task}  {m.source} -> {m.target}  "
              f"({_lag(procs[m.target], m.task, stateful[m.task])})" for m in moved]
    lines += [f"  place   {m.task}  -> {m.target}  "
              f"({_lag(procs[m.target], m.task, stateful[m.task])})" for m in placed]
    lines += [f"  warmup  {t}  on {pid}, active stays on {owner[t]}  "
              f"({_lag(procs[pid], t)})" for t, pid in sorted(warmups)]
    old = {(t, p.id) for p in scenario.processors for t in p.standby}
    new = {(t, p.id) for p in result.processors for t in p.standby}
    promoted = {(t, pid) for t, pid in old - new if owner.get(t) == pid}
    lines.append(f"standbys: {len(old & new)} kept, {len(new - old)} new, "
                 f"{len(old - new - promoted)} dropped, {len(promoted)} promoted to active")
    if result.follow_up:
        lines.append(f"follow-up: yes; run again once the warmups report lag <= "
                     f"{scenario.config.acceptable_lag}")
    else:
        lines.append("follow-up: no; this is the target assignment")
    return lines


@click.command("assign", epilog=epilog("assign"))
@click.option("--scenario", "scenario_path", required=True, metavar="FILE",
              type=click.Path(dir_okay=False, allow_dash=True),
              help="A JSON scenario: tasks, processors (capacity, previous roles, lags), "
                   "config.")
@click.option("--json", "as_json", is_flag=True, help="Print the pinned JSON form.")
def assign_command(scenario_path: str, as_json: bool) -> None:
    """Run the assignor offline on a scenario (what-if)."""
    scenario = _load(scenario_path)
    result = assign(scenario.tasks, scenario.processors, scenario.config)
    if as_json:
        click.echo(json.dumps(format_assignment(result), indent=2))
        return
    config = scenario.config
    stateful = sum(t.stateful for t in scenario.tasks)
    click.echo(f"scenario {scenario_path}: {len(scenario.tasks)} tasks ({stateful} stateful) "
               f"on {len(scenario.processors)} processors; acceptable_lag "
               f"{config.acceptable_lag}, max_warmups {config.max_warmups}, num_standbys "
               f"{config.num_standbys}, balance_factor {config.balance_factor}")
    click.echo("")
    click.echo("\n".join(_table(scenario, result)))
    click.echo("")
    click.echo("\n".join(_summary(scenario, result,
                                  owner_changes(scenario.processors, result))))
