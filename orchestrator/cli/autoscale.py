"""`baton autoscale -c FILE [--min N] [--max N] [--dry-run] [--json]`: act on the
coordinator's recommendation (pinned in docs/design.md).

A long-running client of the leading coordinator: every `[autoscale] poll_interval_ms`
it reads `GET /status` and takes the one step orchestrator/core/scaling.py gives (tidy,
wait, scale out, scale in, expand, hold) through the launcher of
orchestrator/cli/launchers.py. Each decision is reported to the coordinator (`POST
/autoscale/decisions`: logged there with its inputs, counted in
`baton_autoscale_decisions_total{direction,outcome}`, shown by `baton status`) when it
is made (`started`) and when it ends (`done` or `failed`), and logged here too. A poll
that ends a decision takes no new one: the next is sized on the status after it.

What survives a restart of the autoscaler: the processors it started (the launcher's
records), and the decision in flight (`decision.json` in the same state directory,
written before it acts and removed when it ends). The coordinator's status says where
that decision is (a processor draining, a started one not registered yet), so a
restarted autoscaler waits for it and reports its end; it never starts it twice. A
coordinator failover is a few polls the client retries through (it follows the
leader); a coordinator away longer is logged, and the autoscaler goes on polling.
SIGTERM stops the autoscaler at once (exit 0) and leaves its processors running.

`--dry-run` reads the status once and prints the recommendation, its inputs and the
step it would take, then exits 0.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import click

from orchestrator.cli.conventions import epilog, fail
from orchestrator.cli.launchers import Launcher, LauncherError, launcher_for, state_dir_of
from orchestrator.cli.session import load
from orchestrator.core.scaling import (
    Bounds,
    Expand,
    Hold,
    ScaleIn,
    ScaleOut,
    Situation,
    Step,
    Tidy,
    Wait,
    next_step,
)
from orchestrator.wire.client import CoordinatorClient, CoordinatorError, CoordinatorUnreachable
from orchestrator.wire.config import Config
from orchestrator.wire.token import TokenError, read_token

__all__ = ["Autoscaler", "autoscale_command"]

log = logging.getLogger("baton.autoscale")

_DECISION_FILE = "decision.json"


@dataclass
class _Decision:
    """The decision in flight, as `decision.json` keeps it."""

    direction: str
    current: int
    target: int
    processors: list[str]
    reason: str
    inputs: dict[str, Any] = field(default_factory=dict)

    def report(self, outcome: str, reason: str | None = None) -> dict[str, Any]:
        return {"direction": self.direction, "outcome": outcome, "current": self.current,
                "target": self.target, "processors": self.processors,
                "reason": reason or self.reason, "inputs": self.inputs}


def _inputs(status: dict[str, Any]) -> dict[str, Any]:
    """The recommendation's inputs, flat: what a decision is logged and reported with."""
    a = status.get("autoscale") or {}
    flat = {k: a.get(k) for k in ("current", "capacity_per_processor", "demand",
                                  "input_rate", "lag", "expand")}
    flat.update(a.get("inputs") or {})
    flat["recommended_processors"] = status.get("recommended_processors")
    return flat


class Autoscaler:
    """One job's autoscaler: `poll()` reads the status and takes one step.

    Args:
        client: the coordinator's client (the operator token).
        launcher: starts and stops processors, knows which it started.
        where: its state directory (the decision in flight).
        bounds: the processor counts to keep to.
        prefix: new processors' id prefix.
        start_timeout_s: a started processor not registered by then is stopped again.
        echo: also print each decision's report as a JSON line (--json).
    """

    def __init__(self, client: CoordinatorClient, launcher: Launcher, where: Path,
                 bounds: Bounds, prefix: str, start_timeout_s: float,
                 echo: bool = False) -> None:
        self._client, self._launcher = client, launcher
        self._file = where / _DECISION_FILE
        self._bounds, self._prefix = bounds, prefix
        self._start_timeout_s, self._echo = start_timeout_s, echo
        self._launched: dict[str, float] = {}     # processor -> when it was started
        self._open = self._read_open()

    def situation(self) -> tuple[dict[str, Any], Situation]:
        status = self._client.status()
        return status, Situation(status, self._launcher.started(), self._bounds,
                                 self._prefix)

    def poll(self) -> Step:
        """Read the status once and take the step it calls for."""
        status, situation = self.situation()
        step = next_step(situation)
        ended = self._follow_open(status, situation)
        acting = isinstance(step, ScaleOut | ScaleIn | Expand)
        if acting and ended:
            return Wait("a decision just ended: the next one on the next status")
        if acting and self._open is not None:   # what it did may not show yet (a split)
            return Wait(f"the {self._open.direction} decision is in flight")
        if isinstance(step, Tidy):
            self._tidy(step)
        elif isinstance(step, Wait):
            self._time_out_starts(situation)
        elif isinstance(step, ScaleOut):
            self._scale_out(step, status)
        elif isinstance(step, ScaleIn):
            self._scale_in(step, status)
        elif isinstance(step, Expand):
            self._expand(step, status)
        return step

    # ---- the decision in flight ------------------------------------------------------

    def _read_open(self) -> _Decision | None:
        try:
            decision = _Decision(**json.loads(self._file.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            log.warning("%s cannot be read (%s): no decision in flight assumed",
                        self._file, exc)
            return None
        log.info("a %s decision was in flight before this start (%s): waiting for its end",
                 decision.direction, ", ".join(decision.processors) or "-")
        return decision

    def _begin(self, decision: _Decision) -> None:
        self._save(decision)
        self._report(decision.report("started"))

    def _save(self, decision: _Decision) -> None:
        temporary = self._file.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(decision)))
        temporary.replace(self._file)
        self._open = decision

    def _end(self, outcome: str, reason: str | None = None) -> None:
        if self._open is None:
            return
        self._report(self._open.report(outcome, reason))
        self._open = None
        self._file.unlink(missing_ok=True)

    def _report(self, report: dict[str, Any]) -> None:
        log.info("decision %s %s: %d -> %d processors (%s): %s; inputs %s",
                 report["direction"], report["outcome"], report["current"],
                 report["target"], ", ".join(report["processors"]) or "-",
                 report["reason"], report["inputs"])
        if self._echo:
            click.echo(json.dumps(report))
        try:
            self._client.autoscale_decision(report)
        except CoordinatorError as exc:     # the decision stands; only its report is lost
            log.warning("the coordinator did not record the decision: %s", exc)

    def _follow_open(self, status: dict[str, Any], situation: Situation) -> bool:
        """End the decision in flight once the status shows it through; True if it
        ended now."""
        decision = self._open
        if decision is None:
            return False
        alive = {p["id"] for p in status.get("processors", []) if p["alive"]}
        mine = set(decision.processors)
        if decision.direction == "up" and all(p in alive or p not in situation.started
                                              for p in mine):
            lost = sorted(mine - alive)     # stopped (and tidied) before registering
            self._end("failed" if lost else "done",
                      f"{', '.join(lost)} stopped before registering" if lost
                      else f"{', '.join(decision.processors)} registered")
        elif decision.direction == "down" and not mine & alive and \
                not mine & set(situation.started):
            listed = {p["id"]: p for p in status.get("processors", []) if p["id"] in mine}
            if self._forget(set(listed)):   # else again at the next poll
                why = "; ".join(f"{p}: {q.get('reason')}" for p, q in listed.items()
                                if q.get("reason"))
                self._end("done", f"{', '.join(decision.processors)} drained and stopped"
                          + (f" ({why})" if why else ""))
        elif decision.direction == "expand" and not status.get("handoffs") and \
                status.get("balanced") and \
                len(status.get("tasks", [])) > int(decision.inputs.get("tasks") or 0):
            self._end("done", "expanded and split; the children took their tasks over")
        return self._open is None

    def _forget(self, processors: set[str]) -> bool:
        """A drained processor the launcher did not start leaves the status too;
        False while the coordinator refuses (a handoff in flight still names it)."""
        done = True
        for processor in sorted(processors):
            try:
                self._client.forget(processor)
            except CoordinatorError as exc:
                if exc.status != 404:
                    log.info("%s is not forgotten yet: %s", processor, exc)
                    done = False
        return done

    # ---- the steps -------------------------------------------------------------------

    def _tidy(self, step: Tidy) -> None:
        for processor in step.processors:
            try:
                self._client.forget(processor)
            except CoordinatorError as exc:
                if exc.status != 404:       # 409: a handoff still names it; next poll
                    log.info("forgetting %s waits: %s", processor, exc)
                    continue
            try:
                self._launcher.stop(processor)
            except LauncherError as exc:
                log.warning("%s", exc)
                continue
            self._launched.pop(processor, None)
            log.info("%s stopped and forgotten (%s)", processor, step.reason)

    def _time_out_starts(self, situation: Situation) -> None:
        now = time.monotonic()
        alive = {p["id"] for p in situation.status.get("processors", []) if p["alive"]}
        for processor in situation.started:
            if processor in alive:
                self._launched.pop(processor, None)
                continue
            since = self._launched.setdefault(processor, now)
            if now - since > self._start_timeout_s:
                log.warning("%s has not registered within %.0f s ([autoscale] "
                            "start_timeout_ms): stopping it", processor,
                            self._start_timeout_s)
                try:
                    self._launcher.stop(processor)
                except LauncherError as exc:
                    log.warning("%s", exc)
                self._launched.pop(processor, None)

    def _scale_out(self, step: ScaleOut, status: dict[str, Any]) -> None:
        self._begin(_Decision("up", step.current, step.target, list(step.processors),
                              step.reason, _inputs(status)))
        for processor in step.processors:
            try:
                self._launcher.start(processor)
            except LauncherError as exc:
                self._end("failed", str(exc))
                return
            self._launched[processor] = time.monotonic()

    def _scale_in(self, step: ScaleIn, status: dict[str, Any]) -> None:
        self._begin(_Decision("down", step.current, step.target, list(step.processors),
                              step.reason, _inputs(status)))
        draining: list[str] = []
        refused = ""
        for processor in step.processors:
            try:
                self._client.drain(processor)
            except CoordinatorError as exc:     # unreachable included: no drain to wait for
                refused = f"the coordinator did not start the drain of {processor}: {exc}"
                break
            draining.append(processor)
        if not draining:
            self._end("failed", refused)
        elif refused and self._open is not None:    # the decision goes on with the others
            log.warning("%s; the decision waits for %s only", refused, ", ".join(draining))
            self._save(_Decision(**{**asdict(self._open), "processors": draining}))

    def _expand(self, step: Expand, status: dict[str, Any]) -> None:
        self._begin(_Decision("expand", step.current, step.target, [],
                              step.reason + "; " + ", ".join(
                                  f"{t} to {n} partitions" for t, n in step.partitions.items()),
                              _inputs(status)))
        try:
            for topic, partitions in step.partitions.items():
                self._client.expand(topic, partitions)
            self._client.split(False)
        except CoordinatorError as exc:
            self._end("failed", f"the coordinator refused: {exc}")


def _describe(step: Step) -> dict[str, Any]:
    kind = {Tidy: "tidy", Wait: "wait", Hold: "hold", ScaleOut: "scale_out",
            ScaleIn: "scale_in", Expand: "expand"}[type(step)]
    return {"step": kind, **{k: (list(v) if isinstance(v, tuple) else
                                 dict(v) if isinstance(v, dict) else v)
                             for k, v in asdict(step).items()}}


def _client(config: Config) -> CoordinatorClient:
    if not config.token_file.exists():
        fail(f"the coordinator has not written its token file {config.token_file} yet "
             f"(coordinator.token_file in {config.path}): start it first", 1)
    path = config.token_file
    try:
        read_token(path)
    except TokenError as exc:
        fail(f"{exc} (coordinator.token_file in {config.path})", 2)

    def notify(message: str, waiting: bool) -> None:
        log.info("%s", message)
    try:
        return CoordinatorClient.for_config(config, lambda: read_token(path), notify=notify)
    except ValueError as exc:
        fail(f"{exc} (in {config.path})", 2)


def _bounds(config: Config, least: int | None, most: int | None) -> Bounds:
    a = config.autoscale
    bounds = Bounds(least if least is not None else a.min_processors,
                    most if most is not None else a.max_processors)
    if bounds.most and bounds.most < bounds.least:
        fail(f"--max {bounds.most} is below --min {bounds.least} (or [autoscale] "
             f"min_processors in {config.path})", 2)
    return bounds


@click.command("autoscale", epilog=epilog("autoscale"))
@click.option("-c", "--config", "config_path", required=True, metavar="FILE",
              type=click.Path(dir_okay=False), help="The job's TOML config.")
@click.option("--min", "least", type=click.IntRange(min=1), default=None, metavar="N",
              help="The fewest processors (overrides [autoscale] min_processors).")
@click.option("--max", "most", type=click.IntRange(min=0), default=None, metavar="N",
              help="The most processors; 0: the recommendation's own bound "
                   "(overrides [autoscale] max_processors).")
@click.option("--dry-run", is_flag=True,
              help="Print the recommendation, its inputs and the step it would take; "
                   "change nothing.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: the dry run's, or one line per decision report.")
def autoscale_command(config_path: str, least: int | None, most: int | None, dry_run: bool,
                      as_json: bool) -> None:
    """Act on the coordinator's recommendation: start processors through the launcher
    ([autoscale] launcher) to scale out; drain one, then stop it, to scale in.

    It acts only while no handoff, drain or split is in flight and the job is
    balanced. SIGTERM stops it (exit 0); the processors it started keep running and a
    restarted autoscaler finds them and its decision in flight again.
    """
    from orchestrator.wire.logs import setup_logging

    config = load(config_path)
    bounds = _bounds(config, least, most)
    setup_logging("autoscale", secrets=config.secret_values())
    client = _client(config)
    launcher = launcher_for(config)
    scaler = Autoscaler(client, launcher, state_dir_of(config), bounds,
                        config.autoscale.processor_prefix,
                        config.autoscale.start_timeout_ms / 1000, echo=as_json)
    try:
        if dry_run:
            _dry_run(scaler, bounds, as_json)
            return
        _run(scaler, config.autoscale.poll_interval_ms / 1000)
    except CoordinatorUnreachable as exc:
        fail(str(exc), 1)
    finally:
        client.close()


def _dry_run(scaler: Autoscaler, bounds: Bounds, as_json: bool) -> None:
    status, situation = scaler.situation()
    step = next_step(situation)
    live = [p["id"] for p in status["processors"] if p["alive"] and not p.get("draining")]
    out = {"recommended_processors": status.get("recommended_processors"),
           "autoscale": status.get("autoscale"), "processors": live,
           "bounds": {"min": bounds.least, "max": bounds.most}, "action": _describe(step),
           "decisions": status.get("autoscale_decisions", [])}
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    a = status.get("autoscale") or {}
    click.echo(f"recommended processors: {out['recommended_processors']} (now {len(live)}: "
               f"{', '.join(live) or '-'})")
    for key in ("reason", "capacity_per_processor", "demand", "input_rate", "lag"):
        click.echo(f"  {key}: {a.get(key)}")
    click.echo(f"would: {out['action']['step']}: " + json.dumps(
        {k: v for k, v in out["action"].items() if k != "step"}))


def _run(scaler: Autoscaler, interval: float) -> None:
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("autoscaling every %.1f s", interval)
    last = ""
    while not stopping.is_set():
        try:
            step = scaler.poll()
        except CoordinatorUnreachable as exc:
            log.warning("%s; trying again", exc)
        else:
            said = f"{type(step).__name__.lower()}: {getattr(step, 'reason', '')}"
            if said != last and isinstance(step, Wait | Hold):
                log.info("%s", said)
            last = said
        stopping.wait(interval)
    log.info("stopped (the processors it started keep running)")
    sys.exit(0)
