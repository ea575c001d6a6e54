"""How `baton autoscale` starts and stops processors: `[autoscale] launcher`.

Every launcher records the processors it started as files in its state directory
(`[autoscale] state_dir`), so an autoscaler that restarts knows them again: `started()`
reads them back with whether each still runs. `stop()` is for a processor that is
already drained (it exits 0 on its own when its drain ends) or gone: it makes sure it
stays stopped and drops the record; it is idempotent.

- `local`: child processes on this host (`baton processor -c FILE --id ID`, each in a
  session of its own, its output in `<id>.log`), recorded as `<id>.pid` with the
  process's start time, so a reused pid is never taken for it. They outlive the
  autoscaler: the processors are the job.
- `systemd`: the template units `baton-processor@ID` (deploy/systemd), enabled and
  started, then disabled and stopped; whether one runs is its ActiveState.
- `command`: a start and a stop command of the operator's (`{id}` in each), for any
  other platform; it cannot tell whether a processor runs, so the coordinator's status
  says so (and `start_timeout_ms` bounds a start that never registers).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from orchestrator.wire.config import Config

__all__ = ["CommandLauncher", "Launcher", "LauncherError", "LocalLauncher",
           "SystemdLauncher", "launcher_for", "state_dir_of"]

# A processor asked to stop (SIGTERM) gets this long before SIGKILL.
_STOP_GRACE_S = 30.0
# How long a launcher's command may take (systemctl, the operator's start and stop).
_COMMAND_TIMEOUT_S = 120.0


class LauncherError(RuntimeError):
    """A processor could not be started or stopped; the message names it and why."""


class Launcher(Protocol):
    """Starts and stops processors, and knows which it started."""

    def start(self, processor: str) -> None: ...

    def stop(self, processor: str) -> None: ...

    def started(self) -> dict[str, bool]: ...


def state_dir_of(config: Config) -> Path:
    """`[autoscale] state_dir`, or `<processor.state_dir>/autoscale-<job>`."""
    if config.autoscale.state_dir:
        return config.path_of(config.autoscale.state_dir)
    return config.state_dir / f"autoscale-{config.job.name}"


def launcher_for(config: Config) -> Launcher:
    """The launcher `[autoscale] launcher` names, recording in `state_dir_of(config)`."""
    where = state_dir_of(config)
    where.mkdir(parents=True, exist_ok=True)
    a = config.autoscale
    if a.launcher == "systemd":
        return SystemdLauncher(where)
    if a.launcher == "command":
        return CommandLauncher(where, a.start_command, a.stop_command)
    return LocalLauncher(where, config.path)


class _Records:
    """The `<id><suffix>` files of a state directory."""

    def __init__(self, where: Path, suffix: str) -> None:
        self.where, self.suffix = where, suffix

    def ids(self) -> list[str]:
        return sorted(p.name[:-len(self.suffix)] for p in self.where.glob(f"*{self.suffix}"))

    def write(self, processor: str, text: str) -> None:
        path = self.where / f"{processor}{self.suffix}"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(text)
        temporary.replace(path)

    def read(self, processor: str) -> str:
        try:
            return (self.where / f"{processor}{self.suffix}").read_text()
        except FileNotFoundError:
            return ""

    def drop(self, processor: str) -> None:
        (self.where / f"{processor}{self.suffix}").unlink(missing_ok=True)


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), None when it is not running
    (gone, or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


class LocalLauncher:
    """Processors as child processes of this host (see the module)."""

    def __init__(self, where: Path, config_path: Path,
                 command: Sequence[str] = (sys.executable, "-m", "orchestrator.cli")) -> None:
        self._records = _Records(where, ".pid")
        self._config_path, self._command = config_path, list(command)
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, processor: str) -> None:
        log = self._records.where / f"{processor}.log"
        try:
            with log.open("ab") as out:
                child = subprocess.Popen(
                    [*self._command, "processor", "-c", str(self._config_path), "--id",
                     processor], stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise LauncherError(f"could not start processor {processor}: {exc}") from exc
        self._children[processor] = child
        self._records.write(processor, f"{child.pid} {_start_time(child.pid) or ''}\n")

    def _pid(self, processor: str) -> int | None:
        """The recorded pid while that very process runs."""
        parts = self._records.read(processor).split()
        if len(parts) != 2:
            return None
        pid, started = int(parts[0]), parts[1]
        return pid if _start_time(pid) == started else None

    def started(self) -> dict[str, bool]:
        for child in self._children.values():
            child.poll()                    # reap an exited child of this autoscaler
        return {p: self._pid(p) is not None for p in self._records.ids()}

    def stop(self, processor: str) -> None:
        pid = self._pid(processor)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + _STOP_GRACE_S
            while self._pid(processor) is not None and time.monotonic() < deadline:
                self._reap(processor)
                time.sleep(0.1)
            if self._pid(processor) is not None:
                os.kill(pid, signal.SIGKILL)
        self._reap(processor)
        self._records.drop(processor)

    def _reap(self, processor: str) -> None:
        child = self._children.get(processor)
        if child is not None and child.poll() is not None:
            del self._children[processor]


def _run(command: Sequence[str] | str, what: str) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(command, shell=isinstance(command, str), capture_output=True,
                              text=True, timeout=_COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LauncherError(f"{what}: {exc}") from exc
    if done.returncode != 0:
        raise LauncherError(f"{what}: exit {done.returncode}: "
                            f"{(done.stderr or done.stdout).strip()[-500:]}")
    return done


class SystemdLauncher:
    """Processors as systemd template units `baton-processor@ID` (see the module)."""

    UNIT = "baton-processor@{id}.service"

    def __init__(self, where: Path, systemctl: Sequence[str] = ("systemctl",)) -> None:
        self._records = _Records(where, ".unit")
        self._systemctl = list(systemctl)

    def _unit(self, processor: str) -> str:
        return self.UNIT.format(id=processor)

    def start(self, processor: str) -> None:
        unit = self._unit(processor)
        self._records.write(processor, unit + "\n")
        _run([*self._systemctl, "enable", "--now", unit], f"could not start {unit}")

    def started(self) -> dict[str, bool]:
        out = {}
        for processor in self._records.ids():
            shown = subprocess.run(
                [*self._systemctl, "show", "-p", "ActiveState", "--value",
                 self._unit(processor)], capture_output=True, text=True,
                timeout=_COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
            # unknown (systemctl failed): running, so nothing is tidied on a hiccup
            out[processor] = shown.returncode != 0 or shown.stdout.strip() in (
                "active", "activating", "reloading", "deactivating")
        return out

    def stop(self, processor: str) -> None:
        unit = self._unit(processor)
        _run([*self._systemctl, "disable", "--now", unit], f"could not stop {unit}")
        self._records.drop(processor)


class CommandLauncher:
    """Processors started and stopped by the operator's commands (see the module)."""

    def __init__(self, where: Path, start_command: str, stop_command: str) -> None:
        self._records = _Records(where, ".started")
        self._start, self._stop = start_command, stop_command

    def start(self, processor: str) -> None:
        self._records.write(processor, self._start + "\n")
        _run(self._start.replace("{id}", processor),
             f"[autoscale] start_command for processor {processor}")

    def started(self) -> dict[str, bool]:
        return dict.fromkeys(self._records.ids(), True)

    def stop(self, processor: str) -> None:
        _run(self._stop.replace("{id}", processor),
             f"[autoscale] stop_command for processor {processor}")
        self._records.drop(processor)
