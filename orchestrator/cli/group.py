"""`baton group`: print a grouping, or fixed-task expand an earlier one (pinned: docs/design.md).

Human output is a table of tasks; ``--json`` prints exactly what ``--previous`` reads back.
Every bad argument exits 2 (click's usage-error code) with a message naming it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import click

from orchestrator.cli.conventions import epilog
from orchestrator.core.grouping import (
    SCHEMES,
    Grouping,
    GroupingError,
    Inputs,
    expand,
    expansion_parents,
    group,
    parse_partition,
)

__all__ = ["group_command"]


def _parse_inputs(ctx: click.Context, param: click.Parameter, values: Sequence[str]) -> Inputs:
    """Turn each ``T=N`` into ``(T, N)``; the grouping module checks the rest."""
    inputs = []
    for value in values:
        topic, sep, count = value.rpartition("=")
        if not sep or not topic:
            raise click.BadParameter(f"{value!r} is not T=N (a topic, '=', a partition count)",
                                     ctx, param)
        if not count.isascii() or not count.isdigit() or int(count) < 1:
            raise click.BadParameter(f"{value!r}: partition count {count!r} is not a positive "
                                     f"integer", ctx, param)
        inputs.append((topic, int(count)))
    return tuple(inputs)


def _load_previous(path: str) -> Grouping:
    """Read an earlier ``baton group --json`` output ("-" reads standard input)."""
    hint = "'--previous'"
    try:
        with click.open_file(path, encoding="utf-8") as stream:
            data = json.load(stream)
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror or exc}",
                                 param_hint=hint) from exc
    except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
        raise click.BadParameter(f"{path} is not JSON ({exc}); expected the output of "
                                 f"'baton group --json'", param_hint=hint) from exc
    try:
        return Grouping.from_json(data)
    except GroupingError as exc:
        raise click.BadParameter(f"{path} is not a grouping: {exc}", param_hint=hint) from exc


def _compact(partitions: Sequence[str]) -> str:
    """``t:0 t:1 t:2 t:5 u:0`` -> ``t:0-2,5 u:0``, so big tasks stay on one readable line."""
    runs: list[tuple[str, list[list[int]]]] = []
    for partition in partitions:
        topic, number = parse_partition(partition)
        if not runs or runs[-1][0] != topic:
            runs.append((topic, []))
        spans = runs[-1][1]
        if spans and spans[-1][-1] == number - 1:
            spans[-1][1:] = [number]
        else:
            spans.append([number])
    return " ".join(topic + ":" + ",".join("-".join(map(str, s)) for s in spans)
                    for topic, spans in runs)


def _render(grouping: Grouping, parents: dict[str, str]) -> str:
    """The human table: a summary line, one row per task, then the expansion barrier."""
    inputs = ", ".join(f"{t}={n}" for t, n in grouping.inputs)
    rows = [("TASK", "N", "PARTITIONS")]
    rows += [(t.name, str(len(t.partitions)), _compact(t.partitions)) for t in grouping.tasks]
    width = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [f"scheme {grouping.scheme}, inputs {inputs}: {len(grouping.tasks)} tasks", ""]
    lines += [f"{a:<{width[0]}}  {b:>{width[1]}}  {c}" for a, b, c in rows]
    if parents:
        lines += ["", "new partitions start after their parent (expansion barrier):"]
        lines += [f"  {child} <- {parent}" for child, parent in parents.items()]
    return "\n".join(lines)


@click.command("group", epilog=epilog("group"))
@click.option("--scheme", type=click.Choice(SCHEMES), default=None,
              help="Grouping scheme [default: partition, or the --previous file's].")
@click.option("--input", "inputs", multiple=True, required=True, metavar="T=N",
              callback=_parse_inputs, help="An input topic and its partition count; repeat, "
              "in input order.")
@click.option("--previous", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              metavar="FILE", help="An earlier --json output: keep its tasks (fixed-task "
              "expansion) instead of grouping from scratch.")
@click.option("--json", "as_json", is_flag=True, help="Print the pinned JSON form.")
def group_command(scheme: str | None, inputs: Inputs, previous: str | None,
                  as_json: bool) -> None:
    """Print how input partitions group into tasks."""
    parents: dict[str, str] = {}
    try:
        if previous is None:
            grouping = group(inputs, scheme or "partition")
        else:
            old = _load_previous(previous)
            if scheme is not None and scheme != old.scheme:
                raise click.UsageError(
                    f"--scheme {scheme} differs from {previous}'s scheme {old.scheme}: "
                    f"fixed-task expansion keeps the scheme; drop --scheme, or drop "
                    f"--previous to regroup from scratch (all state moves)")
            try:
                grouping = expand(old, inputs)
                parents = expansion_parents(old, grouping)
            except GroupingError as exc:
                raise click.UsageError(f"cannot expand {previous}: {exc}") from exc
    except GroupingError as exc:
        raise click.UsageError(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(grouping.to_json(), indent=2))
    else:
        click.echo(_render(grouping, parents))
