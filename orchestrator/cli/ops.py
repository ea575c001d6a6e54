"""Operator commands (pinned in DESIGN.md): coordinator, status, wait, plan, drain, expand,
split.

Human output by default (rich tables, a progress bar with an ETA while waiting);
`--json` prints the API's JSON for scripts. Exit codes follow orchestrator/cli.py:
0 done, 1 not done (timeout, unreachable coordinator, refused operation), 2 bad
usage or configuration. The token comes from `coordinator.token_file`.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from orchestrator.wire.client import CoordinatorClient, CoordinatorError, CoordinatorUnreachable
from orchestrator.wire.config import Config, ConfigError, load_config
from orchestrator.wire.token import TokenError, read_token

__all__ = ["COMMANDS"]

# How often `wait`, `drain --wait` and `expand` poll /status.
_POLL_S = 0.5
_DEFAULT_TIMEOUT_S = 600.0

_config_option = click.option("-c", "--config", "config_path", required=True, metavar="FILE",
                               type=click.Path(dir_okay=False), help="The job's TOML config.")
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _load(path: str, read_secrets: bool = False) -> Config:
    """The config; only the coordinator reads [kafka] secrets, the other commands talk
    to it over HTTP (see `load_config`)."""
    try:
        return load_config(path, read_secrets)
    except ConfigError as exc:
        _fail(str(exc), 2)


@contextmanager
def _client(config: Config) -> Iterator[CoordinatorClient]:
    """A client with the token; coordinator errors become clear messages and exit codes."""
    try:
        token = read_token(config.token_file)
    except TokenError as exc:
        _fail(f"{exc} (coordinator.token_file in {config.path})", 2)
    try:
        client = CoordinatorClient.for_config(config, token)
    except ValueError as exc:
        _fail(f"{exc} (in {config.path})", 2)
    try:
        yield client
    except CoordinatorUnreachable as exc:
        _fail(str(exc), 1)
    except CoordinatorError as exc:
        _fail(str(exc), 2 if exc.status in (400, 404, 422) else 1)
    finally:
        client.close()


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


# ---- coordinator ------------------------------------------------------------------------


@click.command("coordinator")
@_config_option
@click.option("--listen", metavar="HOST:PORT", default=None,
              help="Overrides coordinator.listen (a second coordinator of a job is a standby).")
def coordinator_command(config_path: str, listen: str | None) -> None:
    """Run the coordinator daemon, leader or standby (SIGTERM: clean exit 0)."""
    config = _load(config_path, read_secrets=True)
    if listen is not None:
        if not re.fullmatch(r"[^:\s]+:\d+", listen):
            _fail(f"--listen {listen!r}: expected HOST:PORT", 2)
        config = config.model_copy(update={
            "coordinator": config.coordinator.model_copy(update={"listen": listen})})
    from orchestrator.daemon.main import run_coordinator
    from orchestrator.wire.logs import setup_logging

    setup_logging("coordinator", secrets=config.secret_values())
    sys.exit(run_coordinator(config))


# ---- status -----------------------------------------------------------------------------


@click.command("status")
@_config_option
@_json_option
def status_command(config_path: str, as_json: bool) -> None:
    """The job model, processors, tasks with lag, handoffs in flight, metrics URLs."""
    config = _load(config_path)
    with _client(config) as client:
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
        if p.get("draining"):
            alive += " (draining)"
        table.add_row(p["id"], alive, _names(p["active"]), _names(p["warmup"]),
                      _names(p["standby"]), p.get("metrics_url") or "-")
    console.print(table)
    tasks = Table("task", "partitions", "active on", "lag", title="tasks")
    for t in status["tasks"]:
        tasks.add_row(t["name"], " ".join(t["partitions"]), t["active"] or "[red]none[/]",
                      "?" if t["lag"] is None else str(t["lag"]))
    console.print(tasks)
    if status["handoffs"]:
        moves = Table("task", "from", "to", "phase", "lag", title="handoffs in flight")
        for h in status["handoffs"]:
            moves.add_row(h["task"], h["from"] or "-", h["to"], h["phase"],
                          "?" if h["lag"] is None else str(h["lag"]))
        console.print(moves)
    barriers = status.get("barriers") or {}
    if barriers:
        table = Table("partition", "parent", "barrier", "reached", title="expansion barriers")
        for child, b in sorted(barriers.items()):
            at = (f"offset {b['offset']}" if b.get("settled", True)
                  else f"not settled (at or after offset {b['offset']})")
            table.add_row(child, b["parent"], at, "yes" if b.get("reached") else "no")
        console.print(table)
    for line in status.get("pending", []):
        console.print(f"pending: {line}")
    for line in status.get("errors", []):
        console.print(f"[red]error:[/] {line}")


# ---- wait ---------------------------------------------------------------------------------


def _wait(client: CoordinatorClient, done: Callable[[dict[str, Any]], bool],
          timeout: float, what: str, as_json: bool) -> dict[str, Any]:
    """Poll /status until `done`, with a progress bar; exit 1 naming what is pending."""
    console = Console(stderr=True)
    deadline = time.monotonic() + timeout
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[now]}"), console=console,
                  disable=as_json, transient=True) as progress:
        bar = progress.add_task(what, total=None, now="")
        most = 0
        while True:
            status = client.status()
            finished = done(status)         # may add its own reasons to "pending"
            waiting = list(status.get("pending", []))
            if finished:
                progress.update(bar, total=max(most, 1), completed=max(most, 1), now="")
                return status
            most = max(most, len(waiting), 1)
            progress.update(bar, total=most, completed=most - len(waiting),
                            now=waiting[0] if waiting else "")
            if time.monotonic() >= deadline:
                pending = "; ".join(waiting) or "the condition is not met yet"
                _fail(f"timed out after {timeout:g} s waiting for {what}; pending: {pending}", 1)
            time.sleep(_POLL_S)


def _await_token_file(config: Config, deadline: float, timeout: float) -> None:
    """`baton wait` run right after `baton coordinator`: the coordinator creates its
    token file on its first start, a moment later, so wait for it (within --timeout)
    instead of failing; exit 1 when it never comes."""
    while not config.token_file.exists():
        if time.monotonic() >= deadline:
            _fail(f"timed out after {timeout:g} s waiting for the coordinator's token file "
                  f"{config.token_file} (coordinator.token_file in {config.path}): is the "
                  f"coordinator running?", 1)
        time.sleep(0.1)


def _balanced(status: dict[str, Any]) -> bool:
    return bool(status.get("balanced")) and not status.get("handoffs")


_PROCESSOR_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")


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


@click.command("wait")
@_config_option
@click.option("--until", type=click.Choice(["balanced"]), required=True,
              help="balanced: no handoff in flight and the target assignment reached.")
@click.option("--processors", default="", metavar="ID[,ID...]",
              help="Also wait until these processors are registered and hold tasks (for a "
                   "wait started right after `baton processor --id ...`).")
@click.option("--timeout", type=click.FloatRange(min=0), default=_DEFAULT_TIMEOUT_S,
              show_default=True, help="Seconds before giving up (exit 1).")
@_json_option
def wait_command(config_path: str, until: str, processors: str, timeout: float,
                 as_json: bool) -> None:
    """Block until the job is balanced; exit 1 on timeout naming what is pending.

    A processor started a moment ago may not have registered yet, and the job can look
    balanced without it: name it with --processors to wait for it too.
    """
    config = _load(config_path)
    expected = [p for p in (x.strip() for x in processors.split(",")) if p]
    bad = [p for p in expected if not _PROCESSOR_ID.fullmatch(p)]
    if bad:
        _fail(f"--processors: {bad[0]!r} is not a processor id (letters, digits, . _ -)", 2)

    def done(status: dict[str, Any]) -> bool:
        missing = _not_holding(status, expected)
        status["pending"] = missing + list(status.get("pending", []))
        return not missing and _balanced(status)

    deadline = time.monotonic() + timeout
    _await_token_file(config, deadline, timeout)
    with _client(config) as client:
        status = _wait(client, done, max(0.0, deadline - time.monotonic()), "balanced",
                       as_json)
    if as_json:
        _print_json(status)
    else:
        click.echo(f"balanced at generation {status['generation']}")


# ---- plan ---------------------------------------------------------------------------------


@click.command("plan")
@_config_option
@click.option("--add", multiple=True, metavar="ID", help="A processor to add (repeatable).")
@click.option("--remove", multiple=True, metavar="ID", help="A processor to remove (repeatable).")
@_json_option
def plan_command(config_path: str, add: tuple[str, ...], remove: tuple[str, ...],
                 as_json: bool) -> None:
    """Dry run: the moves, their S2 sizes in records, the estimated catch-up time."""
    config = _load(config_path)
    with _client(config) as client:
        plan = client.plan(add, remove)
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


@click.command("drain")
@_config_option
@click.option("--processor", "processor", required=True, metavar="ID",
              help="The processor to drain.")
@click.option("--wait", "wait", is_flag=True, help="Wait until it has handed over and exited.")
@click.option("--timeout", type=click.FloatRange(min=0), default=_DEFAULT_TIMEOUT_S,
              show_default=True, help="Seconds --wait waits before giving up (exit 1).")
@_json_option
def drain_command(config_path: str, processor: str, wait: bool, timeout: float,
                  as_json: bool) -> None:
    """Scale in: move a processor's tasks away with catch-up, then tell it to exit 0."""
    config = _load(config_path)
    with _client(config) as client:
        result = client.drain(processor)
        if wait:
            result = {**result, "status": _wait(client, _gone(processor), timeout,
                                                f"{processor} drained", as_json)}
    if as_json:
        _print_json(result)
    elif wait:
        click.echo(f"{processor} drained and stopped")
    else:
        click.echo(f"draining {processor}: {len(result['tasks'])} active task(s) to move")


# ---- expand -------------------------------------------------------------------------------


@click.command("expand")
@_config_option
@click.option("--topic", required=True, metavar="T", help="The input topic to grow.")
@click.option("--partitions", required=True, type=click.IntRange(min=1), metavar="N",
              help="Its new partition count (a multiple of the current one).")
@click.option("--timeout", type=click.FloatRange(min=0), default=_DEFAULT_TIMEOUT_S,
              show_default=True, help="Seconds to wait for the new generation to be live.")
@_json_option
def expand_command(config_path: str, topic: str, partitions: int, timeout: float,
                   as_json: bool) -> None:
    """Grow an input topic, record the expansion barrier, wait until it is live."""
    config = _load(config_path)
    with _client(config) as client:
        result = client.expand(topic, partitions)
        generation = int(result["generation"])
        _wait(client, lambda s: s["generation"] >= generation and _balanced(s), timeout,
              f"generation {generation} live", as_json)
    if as_json:
        _print_json(result)
    else:
        click.echo(f"{topic} has {partitions} partitions; generation {generation} is live")
        for child, barrier in result["barriers"].items():
            click.echo(f"  {child} starts after {barrier['parent']} reaches its barrier "
                       f"(at or after offset {barrier['offset']}, settled "
                       f"[job] expansion_grace_ms after the expansion)")


# ---- split --------------------------------------------------------------------------------


@click.command("split")
@_config_option
@click.option("--dry-run", is_flag=True, help="Plan the splits; record nothing.")
@_json_option
def split_command(config_path: str, dry_run: bool, as_json: bool) -> None:
    """After an expansion, split every task that can split into per-partition tasks.

    The children then catch up and take their partitions over like any move; run
    `baton wait --until balanced` to see them through. Running it twice splits once.
    """
    config = _load(config_path)
    with _client(config) as client:
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
                                       plan_command, drain_command, expand_command,
                                       split_command)
