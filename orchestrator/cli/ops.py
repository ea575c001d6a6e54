"""Operator commands (pinned in docs/design.md): coordinator, status, wait, plan, drain, expand,
split; and forget (a dead processor, for good).

Human output by default (rich tables, a progress bar with an ETA while waiting);
`--json` prints the API's JSON for scripts. Each command keeps trying within its own
time limit while no coordinator leads (`--timeout`; see `session`). Exit codes: 0 done,
1 not done (timeout, no leading coordinator, refused operation), 2 bad usage or
configuration. The token comes from `coordinator.token_file`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from orchestrator.cli.conventions import epilog, fail, processor_ids
from orchestrator.cli.session import Session, await_token_file, coordinator, load, poll_until
from orchestrator.wire.client import CLI_LIMIT_S
from orchestrator.wire.status import is_balanced

__all__ = ["COMMANDS"]

# How long `wait`, `drain --wait` and `expand` wait for what they wait for.
_WAIT_TIMEOUT_S = 600.0

_config_option = click.option("-c", "--config", "config_path", required=True, metavar="FILE",
                               type=click.Path(dir_okay=False), help="The job's TOML config.")
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
_limit_option = click.option(
    "--timeout", type=click.FloatRange(min=0), default=CLI_LIMIT_S, show_default=True,
    help="Seconds to keep trying while no coordinator leads (a failover, a restart) "
         "before giving up (exit 1).")


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


# ---- coordinator ------------------------------------------------------------------------


@click.command("coordinator", epilog=epilog("coordinator"))
@_config_option
@click.option("--listen", metavar="HOST:PORT", default=None,
              help="Overrides coordinator.listen (a second coordinator of a job is a standby).")
def coordinator_command(config_path: str, listen: str | None) -> None:
    """Run the coordinator daemon, leader or standby (SIGTERM: clean exit 0)."""
    config = load(config_path, read_secrets=True)
    if listen is not None:
        if not re.fullmatch(r"[^:\s]+:\d+", listen):
            fail(f"--listen {listen!r}: expected HOST:PORT", 2)
        config = config.model_copy(update={
            "coordinator": config.coordinator.model_copy(update={"listen": listen})})
    from orchestrator.daemon.main import run_coordinator
    from orchestrator.wire.logs import setup_logging

    setup_logging("coordinator", secrets=config.secret_values())
    sys.exit(run_coordinator(config))


# ---- status -----------------------------------------------------------------------------


@click.command("status", epilog=epilog("status"))
@_config_option
@_limit_option
@_json_option
def status_command(config_path: str, timeout: float, as_json: bool) -> None:
    """The job model, processors, tasks with lag, handoffs in flight, metrics URLs."""
    config = load(config_path)
    with coordinator(config, Session(timeout)) as client:
        status = client.status()
    if as_json:
        _print_json(status)
    else:
        _render_status(status, Console())


def _names(tasks: list[str]) -> str:
    return ", ".join(tasks) if tasks else "-"


def _render_status(status: dict[str, Any], console: Console) -> None:
    balanced = "[green]balanced[/]" if status.get("balanced") else "[yellow]not balanced[/]"
    console.print(f"job [bold]{status.get('job', '?')}[/], generation "
                  f"{status['generation']}, {balanced}")
    coordinator = status.get("coordinator") or {}
    if coordinator:
        console.print(f"coordinator {coordinator.get('url')}  metrics "
                      f"{coordinator.get('metrics_url')}")
    table = Table("processor", "alive", "active", "warmup", "standby", "metrics",
                  title="processors")
    for p in status["processors"]:
        alive = "yes" if p["alive"] else f"[red]no[/] {p.get('reason', '')}"
        if not p["alive"] and p.get("dead_for_s") is not None:
            alive += f" (dead for {p['dead_for_s']:.0f} s; gone for good? baton forget)"
        if p.get("draining"):
            alive += " (draining)"
        if p.get("disk_full"):
            alive += " (disk full: no new task)"
        table.add_row(p["id"], alive, _names(p["active"]), _names(p["warmup"]),
                      _names(p["standby"]), p.get("metrics_url") or "-")
    console.print(table)
    tasks = Table("task", "partitions", "active on", "lag", title="tasks")
    for t in status["tasks"]:
        lag = "?" if t["lag"] is None else str(t["lag"])
        stalled = [f"{s['processor']} {s['role']}" for s in t.get("stalled", [])]
        if stalled:
            lag += f" [red](stalled: {', '.join(stalled)})[/]"
        tasks.add_row(t["name"], " ".join(t["partitions"]), t["active"] or "[red]none[/]", lag)
    console.print(tasks)
    if status["handoffs"]:
        table = Table("task", "from", "to", "phase", "lag", title="handoffs in flight")
        for h in status["handoffs"]:
            table.add_row(h["task"], h["from"] or "-", h["to"], h["phase"],
                          "?" if h["lag"] is None else str(h["lag"]))
        console.print(table)
    barriers = status.get("barriers") or {}
    if barriers:
        table = Table("partition", "parent", "barrier", "reached", title="expansion barriers")
        for child, b in sorted(barriers.items()):
            at = (f"offset {b['offset']}" if b.get("settled", True)
                  else f"not settled (at or after offset {b['offset']})")
            table.add_row(child, b["parent"], at, "yes" if b.get("reached") else "no")
        console.print(table)
    _render_autoscale(status, console)
    for line in status.get("pending", []):
        console.print(f"pending: {line}")
    for line in status.get("errors", []):
        console.print(f"[red]error:[/] {line}")


def _render_autoscale(status: dict[str, Any], console: Console) -> None:
    """The recommendation, and the last decisions `baton autoscale` reported."""
    found = status.get("autoscale")
    if found:
        console.print(f"recommended processors: {status.get('recommended_processors')} "
                      f"(now {found['current']}, {found['direction']}: {found['reason']})",
                      markup=False, highlight=False)
    decisions = status.get("autoscale_decisions") or []
    if decisions:
        table = Table("direction", "outcome", "from", "to", "processors", "reason",
                      title="autoscale decisions (latest last)")
        for d in decisions[-5:]:
            table.add_row(d["direction"], d["outcome"], str(d["current"]), str(d["target"]),
                          _names(d["processors"]), d["reason"])
        console.print(table)


# ---- wait ---------------------------------------------------------------------------------


def _not_holding(status: dict[str, Any], expected: Sequence[str]) -> list[str]:
    """Why each of `expected` does not hold its share yet (registered, with a task)."""
    live = {p["id"]: p for p in status.get("processors", []) if p.get("alive")}
    out = []
    for pid in expected:
        if pid not in live:
            out.append(f"processor {pid} has not registered yet")
        elif not live[pid].get("active") and len(status.get("tasks", [])) >= len(live):
            out.append(f"processor {pid} holds no active task yet")
    return out


@click.command("wait", epilog=epilog("wait"))
@_config_option
@click.option("--until", type=click.Choice(["balanced"]), required=True,
              help="balanced: no handoff in flight and the target assignment reached.")
@click.option("--processors", multiple=True, metavar="ID[,ID...]",
              help="Also wait until these processors are registered and hold tasks (for a "
                   "wait started right after `baton processor --id ...`); repeatable.")
@click.option("--timeout", type=click.FloatRange(min=0), default=_WAIT_TIMEOUT_S,
              show_default=True,
              help="Seconds before giving up (exit 1), coordinator failovers included.")
@_json_option
def wait_command(config_path: str, until: str, processors: tuple[str, ...], timeout: float,
                 as_json: bool) -> None:
    """Block until the job is balanced; exit 1 on timeout naming what is pending.

    A processor started a moment ago may not have registered yet, and the job can look
    balanced without it: name it with --processors to wait for it too. While no
    coordinator leads (a failover), it keeps trying and says so on stderr.
    """
    expected = processor_ids("--processors", processors)
    config = load(config_path)

    def done(status: dict[str, Any]) -> bool:
        missing = _not_holding(status, expected)
        status["pending"] = missing + list(status.get("pending", []))
        return not missing and is_balanced(status)

    session = Session(timeout)
    await_token_file(config, session)
    with coordinator(config, session) as client:
        status = poll_until(client, done, session, "balanced", as_json)
    if as_json:
        _print_json(status)
    else:
        click.echo(f"balanced at generation {status['generation']}")


# ---- plan ---------------------------------------------------------------------------------


@click.command("plan", epilog=epilog("plan"))
@_config_option
@click.option("--add", multiple=True, metavar="ID[,ID...]",
              help="Processors to add (repeatable).")
@click.option("--remove", multiple=True, metavar="ID[,ID...]",
              help="Processors to remove (repeatable).")
@_limit_option
@_json_option
def plan_command(config_path: str, add: tuple[str, ...], remove: tuple[str, ...],
                 timeout: float, as_json: bool) -> None:
    """Dry run: the moves, their S2 sizes in records, the estimated catch-up time."""
    added, removed = processor_ids("--add", add), processor_ids("--remove", remove)
    config = load(config_path)
    with coordinator(config, Session(timeout)) as client:
        plan = client.plan(added, removed)
    if as_json:
        _print_json(plan)
        return
    console = Console()
    table = Table("task", "from", "to", "replay (records)", "catch-up", title="moves")
    for m in plan["moves"]:
        table.add_row(m["task"], m["from"] or "-", m["to"], f"{m['records']:,}",
                      f"{m['eta_seconds']:g} s")
    console.print(table)
    rate = plan["rate"]
    console.print(f"{len(plan['moves'])} move(s), {plan['total_records']:,} records to replay; "
                  f"about {plan['eta_seconds']:g} s at {rate['records_per_second']:,.0f} "
                  f"records/s per warm-up ({rate['source']} rate, "
                  f"{rate['parallel_warmups']} in parallel)")


# ---- drain --------------------------------------------------------------------------------


def _gone(pid: str) -> Callable[[dict[str, Any]], bool]:
    def check(status: dict[str, Any]) -> bool:
        mine = [p for p in status["processors"] if p["id"] == pid]
        return not mine or (not mine[0]["alive"] and not mine[0]["active"])
    return check


@click.command("drain", epilog=epilog("drain"))
@_config_option
@click.option("--processor", "processor", required=True, metavar="ID",
              help="The processor to drain.")
@click.option("--wait", "wait", is_flag=True, help="Wait until it has handed over and exited.")
@click.option("--timeout", type=click.FloatRange(min=0), default=None,
              help=f"Seconds before giving up (exit 1), coordinator failovers included "
                   f"[default: {_WAIT_TIMEOUT_S:g} with --wait, else {CLI_LIMIT_S:g}].")
@_json_option
def drain_command(config_path: str, processor: str, wait: bool, timeout: float | None,
                  as_json: bool) -> None:
    """Scale in: move a processor's tasks away with catch-up, then tell it to exit 0."""
    config = load(config_path)
    session = Session(timeout if timeout is not None
                      else _WAIT_TIMEOUT_S if wait else CLI_LIMIT_S)
    with coordinator(config, session) as client:
        result = client.drain(processor)
        if wait:
            result = {**result, "status": poll_until(
                client, _gone(processor), session, f"{processor} drained", as_json,
                applied=f"the drain of {processor} was requested and goes on")}
    if as_json:
        _print_json(result)
    elif wait:
        click.echo(f"{processor} drained and stopped")
    else:
        click.echo(f"draining {processor}: {len(result['tasks'])} active task(s) to move")


# ---- forget -------------------------------------------------------------------------------


@click.command("forget", epilog=epilog("forget"))
@_config_option
@click.option("--processor", "processor", required=True, metavar="ID",
              help="The dead processor to forget.")
@_limit_option
@_json_option
def forget_command(config_path: str, processor: str, timeout: float, as_json: bool) -> None:
    """Remove a dead processor for good (its host is gone): it leaves `baton status`
    and baton_processors{state="dead"}, and its alert clears.

    A live processor is refused (scale it in with `baton drain`). The same id may
    register again later, as a new processor. coordinator.forget_dead_after_ms does
    this on its own.
    """
    processor_ids("--processor", [processor])
    config = load(config_path)
    with coordinator(config, Session(timeout)) as client:
        result = client.forget(processor)
    if as_json:
        _print_json(result)
    else:
        click.echo(f"forgot {processor} (execution {result['execution_id']}, dead: "
                   f"{result['reason'] or 'no reason recorded'})")


# ---- expand -------------------------------------------------------------------------------


@click.command("expand", epilog=epilog("expand"))
@_config_option
@click.option("--topic", required=True, metavar="T", help="The input topic to grow.")
@click.option("--partitions", required=True, type=click.IntRange(min=1), metavar="N",
              help="Its new partition count (a multiple of the current one).")
@click.option("--no-wait", "no_wait", is_flag=True,
              help="Return once the expansion is applied, without waiting until it is live.")
@click.option("--timeout", type=click.FloatRange(min=0), default=_WAIT_TIMEOUT_S,
              show_default=True, help="Seconds to wait for the new generation to be live "
                                      "(exit 1), coordinator failovers included.")
@_json_option
def expand_command(config_path: str, topic: str, partitions: int, no_wait: bool,
                   timeout: float, as_json: bool) -> None:
    """Grow an input topic, record the expansion barrier, wait until it is live.

    The expansion cannot be undone: once the topic has grown and the barrier is
    recorded, a wait that times out (exit 1) says that the expansion itself was applied.
    """
    config = load(config_path)
    session = Session(timeout)
    with coordinator(config, session) as client:
        result = client.expand(topic, partitions)
        generation = int(result["generation"])
        if not no_wait:
            poll_until(client, lambda s: s["generation"] >= generation and is_balanced(s),
                       session, f"generation {generation} live", as_json,
                       applied=f"the expansion itself was applied: {topic} has {partitions} "
                               f"partitions, generation {generation} is recorded")
    if as_json:
        _print_json(result)
    else:
        live = "recorded (not waiting until it is live)" if no_wait else "live"
        click.echo(f"{topic} has {partitions} partitions; generation {generation} is {live}")
        for child, barrier in result["barriers"].items():
            click.echo(f"  {child} starts after {barrier['parent']} reaches its barrier "
                       f"(at or after offset {barrier['offset']}, settled "
                       f"[job] expansion_grace_ms after the expansion)")


# ---- split --------------------------------------------------------------------------------


@click.command("split", epilog=epilog("split"))
@_config_option
@click.option("--dry-run", is_flag=True, help="Plan the splits; record nothing.")
@_limit_option
@_json_option
def split_command(config_path: str, dry_run: bool, timeout: float, as_json: bool) -> None:
    """After an expansion, split every task that can split into per-partition tasks.

    The children then catch up and take their partitions over like any move; run
    `baton wait --until balanced` to see them through. Running it twice splits once.
    """
    config = load(config_path)
    with coordinator(config, Session(timeout)) as client:
        result = client.split(dry_run)
    if as_json:
        _print_json({"splits": result["splits"], "tasks": result["tasks"]})
        return
    if not result["splits"]:
        click.echo(f"nothing to split: {result['tasks']} task(s), each already holds what a "
                   f"fresh grouping would give it (expand an input first)")
        return
    verb = "would split" if dry_run else "split"
    for s in result["splits"]:
        click.echo(f"{verb} {s['parent']} -> {s['child']} {', '.join(s['partitions'])} "
                   f"(S2: {', '.join(s['s2'])})")
    click.echo(f"{result['tasks']} task(s) after the split" + ("" if dry_run else
               f"; generation {result['generation']} recorded"))


COMMANDS: tuple[click.Command, ...] = (coordinator_command, status_command, wait_command,
                                       plan_command, drain_command, forget_command,
                                       expand_command, split_command)
