"""What every `baton` command shares with the others: its exit codes as shown in its
`--help`, the one error format (`baton <command>: message` on stderr), and the one
syntax for lists of processor ids (`--add p3,p4` and `--add p3 --add p4` alike).

These live in one place so a command cannot drift from the rest: the tests read every
command's help and error lines through them.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import NoReturn

import click

__all__ = ["EXIT_CODES", "command_name", "epilog", "fail", "processor_ids"]

_DAEMON = ("0 stopped by SIGTERM; 1 start-up failed (e.g. the broker did not answer, or "
           "its port still in use after bind_timeout_ms); "
           "2 bad usage or configuration (naming the file and key)")
_LEADER = "no coordinator led within --timeout, or one refused (e.g. the token)"

# Each command's exit codes, shown in its --help and in docs/operations.md.
EXIT_CODES: dict[str, str] = {
    "coordinator": _DAEMON + ", or a changelog topic not compacted or short of partitions",
    "processor": (_DAEMON.replace("SIGTERM", "SIGTERM, or drained") + ", a state directory "
                  "another execution holds, a dead-letter topic the broker refuses to "
                  "create, or a broker that would refuse every task (transaction.timeout.ms "
                  "above its limit, an ACL missing on a topic); 3 declared dead by the "
                  "coordinator (a newer execution of its id exists, or it did not release "
                  "in time), or its main loop stuck past processor.loop_timeout_ms"),
    "status": (f"0 done; 1 {_LEADER}, or the coordinator has not written its token file "
               "yet; 2 bad usage or configuration"),
    "wait": ("0 balanced; 1 not balanced within --timeout (naming what is pending); "
             "2 bad usage or configuration"),
    "plan": f"0 done; 1 {_LEADER}; 2 bad usage or configuration",
    "drain": (f"0 draining (with --wait: drained and stopped); 1 {_LEADER}, or not drained "
              "within --timeout; 2 bad usage or configuration, or an unknown processor"),
    "forget": (f"0 forgotten; 1 {_LEADER}, or the processor is alive (drain it) or a "
               "handoff in flight still names it; 2 bad usage or configuration, or an "
               "unknown processor"),
    "expand": (f"0 expanded (and live, unless --no-wait); 1 {_LEADER}, or the wait timed out "
               "after the expansion was applied; 2 bad usage or configuration, or a partition "
               "count that is not a multiple of the current one"),
    "split": (f"0 split, or nothing to split; 1 {_LEADER}; 2 bad usage or configuration, the "
              "single grouping, or the changelog source"),
    "autoscale": ("0 stopped by SIGTERM (the processors it started keep running), or the "
                  "dry run printed; 1 no token file yet (the coordinator has not started), "
                  "or a dry run that no coordinator answered within 60 s; 2 bad usage or "
                  "configuration"),
    "check": "0 all good; 1 the broker or a coordinator did not answer; 2 a config or "
             "permission error (a missing topic included)",
    "token": "0 every token file written; 1 one existed and was kept (--force replaces "
             "it); 2 bad usage or configuration, or a file that cannot be written",
    "audit": "0 the output equals the recomputed one; 1 it differs; 2 the audit could not "
             "run (config, Java, Spark, retention, broker)",
    "demo": "0 the oracle found nothing lost or duplicated; 1 otherwise, or the demo failed",
    "dev": "0 stopped with Ctrl-C; 1 the broker, topics or coordinator did not start, or a "
           "daemon stopped on its own; 2 bad usage, configuration or job class",
    "group": "0 done; 2 bad usage (the message names the argument)",
    "assign": "0 done; 1 the scenario file cannot be read or parsed; 2 bad usage",
    "deploy": ("0 written; 1 this installation lacks its data files; 2 bad usage, or a file "
               "exists there (without --force)"),
}

_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")


def epilog(command: str) -> str:
    """The `--help` epilog of `command`: its exit codes."""
    return f"Exit codes: {EXIT_CODES[command]}."


def command_name() -> str:
    """`baton <command>` for the command running now (`baton` outside one)."""
    ctx = click.get_current_context(silent=True)
    name = ctx.info_name if ctx is not None else None
    return "baton" if not name or name in ("baton", "main") else f"baton {name}"


def fail(message: str, code: int) -> NoReturn:
    """Print `baton <command>: message` on stderr and exit with `code`."""
    click.echo(f"{command_name()}: {message}", err=True)
    sys.exit(code)


def processor_ids(option: str, values: Iterable[str]) -> list[str]:
    """Processor ids given as `--opt p3,p4`, `--opt p3 --opt p4` or both, in order and
    without repeats; exit 2 naming the option and the first id that is not one."""
    ids: list[str] = []
    for value in values:
        for one in (part.strip() for part in value.split(",")):
            if not one:
                continue
            if not _ID.fullmatch(one):
                fail(f"{option}: {one!r} is not a processor id (letters, digits, . _ -)", 2)
            if one not in ids:
                ids.append(one)
    return ids
