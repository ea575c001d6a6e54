"""Spark plumbing shared by the bulk catch-up and `baton audit`.

Two halves: the driver's SparkSession factory, and what runs inside executors for both
users (the Kafka range reader, ranges and chunks, job loading, the fold's state).

The session. Why a factory: a JVM holds one SparkContext, and starting it costs
seconds, so a process builds its session once and reuses it for every bulk catch-up
(thread-safe: the processor starts it on a worker thread). Executors connect back
to the driver, so where it listens depends on the master: with `local[...]` on
127.0.0.1 (nothing else needs it); with a cluster master on this host's address, the
one its route to the master leaves from (executors on other hosts cannot reach a
loopback driver: it would wait for executors, then fall back to the consumer path).
`[spark] conf` is passed to the session as is and wins over every default here
(`spark.driver.host`, `spark.driver.bindAddress`, `spark.authenticate`...). The UI is off,
Python workers run this interpreter (the job's code and Baton must import there), and
shuffles use few partitions (the bulk path chooses its own counts). Before starting the
JVM we check the two things an operator most often gets wrong, with errors saying what
to do: Java missing (or too old), and a `spark://` master that does not answer.

`local[N]` runs tasks without retries by default; we ask for `local[N,attempts]` so a
failed task is retried as on a cluster before the bulk path gives up.

The executor side is plain Python over confluent-kafka (no Spark Kafka connector): it
is imported by name in every Python worker, so it must not import pyspark eagerly.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.wire.clock import Clock, Deadline, SystemClock

__all__ = [
    "EXECUTOR_WAIT_S", "JAVA_MIN_MAJOR", "MASTER_CONNECT_TIMEOUT_S",
    "SHUFFLE_PARTITIONS", "SparkError", "SparkUnavailableError", "TASK_ATTEMPTS",
    "driver_host", "session_settings", "spark_failure", "spark_session", "startup_seconds",
    "stop_spark",
]


# Spark 4 runs on Java 17 or later.
JAVA_MIN_MAJOR = 17


# Task attempts before a stage (and so the bulk catch-up) fails; Spark's cluster default.
TASK_ATTEMPTS = 4


# Shuffle partitions of SQL plans; the bulk path sets its own RDD partition counts.
SHUFFLE_PARTITIONS = 4


# A spark:// master that does not accept a TCP connection in this time is unreachable.
MASTER_CONNECT_TIMEOUT_S = 5.0


# A cluster that grants no executor in this time cannot run the job (no free workers).
EXECUTOR_WAIT_S = 60.0


_LOCAL = re.compile(r"^local(\[(\*|\d+)\])?$")


_lock = threading.Lock()


_session: Any = None


_master: str | None = None


_startup_s: float | None = None


class SparkError(RuntimeError):
    """Spark could not run Baton's work; callers fall back to the consumer path."""


class SparkUnavailableError(SparkError):
    """No SparkSession could be started: Java or the master is missing."""


def spark_session(master: str, app_name: str = "baton",
                  conf: Mapping[str, str | int | float | bool] | None = None,
                  clock: Clock | None = None) -> Any:
    """The process's SparkSession for `master`, started on first use.

    Args:
        master: `local[*]`, `local[N]` or a cluster URL such as `spark://host:7077`.
        app_name: the application name the master shows.
        conf: Spark properties (`[spark] conf`), set as given over Baton's defaults.
        clock: times the start and bounds the wait for an executor (the system clock
            by default).

    Returns:
        A `pyspark.sql.SparkSession` (typed Any: pyspark ships no stubs).

    Raises:
        SparkUnavailableError: Java 17 is missing, the master is unreachable or grants
            no executor, or a session for another master is already running.
    """
    global _session, _master, _startup_s
    with _lock:
        if _session is not None and master == _master:
            return _session
        clock = clock or SystemClock()
        started = clock.monotonic()
        _check_java()
        _check_master(master)
        if _session is not None:
            raise SparkUnavailableError(
                f"a SparkSession for {_master} already runs in this process; cannot start "
                f"one for {master} (one SparkContext per JVM): stop_spark() first")
        session = _build(master, app_name, dict(conf or {}))
        _wait_for_executors(session, master, clock)
        _session, _master = session, master
        _startup_s = clock.monotonic() - started
        return session


def startup_seconds() -> float | None:
    """How long the current session took to start (None before the first one)."""
    return _startup_s


def stop_spark() -> None:
    """Stop the process's session (tests, benchmarks, shutdown); a no-op without one."""
    global _session, _master
    with _lock:
        session, _session, _master = _session, None, None
        if session is not None:
            session.stop()


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def _check_java() -> None:
    """Fail with an instruction, not a Py4J stack trace, when Java is missing or old."""
    java = _java()
    hint = "install Java 17 (e.g. the openjdk-17-jre-headless package) or set JAVA_HOME"
    if java is None:
        raise SparkUnavailableError(f"PySpark needs Java {JAVA_MIN_MAJOR}+ and none was "
                                    f"found on PATH or in JAVA_HOME: {hint}")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True,
                             timeout=30, check=False).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkUnavailableError(f"cannot run {java} -version ({exc}): {hint}") from None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if found is None:
        raise SparkUnavailableError(f"{java} -version printed no version: {hint}")
    major = int(found.group(1))
    if major == 1 and found.group(2):  # "1.8.0" is Java 8
        major = int(found.group(2))
    if major < JAVA_MIN_MAJOR:
        raise SparkUnavailableError(
            f"PySpark needs Java {JAVA_MIN_MAJOR}+, {java} is Java {major}: {hint}")


def _check_master(master: str) -> None:
    """A spark:// master must accept a connection; Spark itself would only hang."""
    if not master.startswith("spark://"):
        return
    reason: OSError | None = None
    for hostport in master.removeprefix("spark://").split(","):
        host, _, port = hostport.rpartition(":")
        if not port.isdigit():
            raise SparkUnavailableError(f"Spark master {master}: {hostport} is not host:port")
        try:
            with socket.create_connection((host, int(port)), MASTER_CONNECT_TIMEOUT_S):
                return
        except OSError as exc:
            reason = exc
    raise SparkUnavailableError(
        f"Spark master {master} is unreachable ({reason}); start the master or fix "
        "[spark] master in the config")


def _effective_master(master: str) -> str:
    """`local[N]` -> `local[N,attempts]`: local mode retries no task otherwise."""
    found = _LOCAL.match(master)
    if found is None:
        return master
    return f"local[{found.group(2) or 1},{TASK_ATTEMPTS}]"


def driver_host(master: str) -> str:
    """Where executors reach the driver by default: 127.0.0.1 for a local master, else
    the address this host's route to the master leaves from (a UDP socket's connect
    sends nothing; it only picks the route), else the address of the host's name."""
    if _LOCAL.match(master):
        return "127.0.0.1"
    found = re.match(r"^spark://([^:,/]+):\d+", master)
    if found is not None:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((found.group(1), 9))
                return str(probe.getsockname()[0])
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.getfqdn())
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _spark_value(value: str | int | float | bool) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def session_settings(master: str, conf: Mapping[str, str | int | float | bool]
                     ) -> dict[str, str]:
    """Every property the session is built with: Baton's defaults, then `conf` as is."""
    host = driver_host(master) if "spark.driver.host" not in conf else None
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
        "spark.task.maxFailures": str(TASK_ATTEMPTS),
        "spark.pyspark.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
    }
    if host is not None:
        defaults["spark.driver.host"] = host
        if _LOCAL.match(master):
            defaults["spark.driver.bindAddress"] = host
    return {**defaults, **{key: _spark_value(value) for key, value in conf.items()}}


def _build(master: str, app_name: str, conf: dict[str, str | int | float | bool]) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(_effective_master(master)).appName(app_name)
    for key, value in session_settings(master, conf).items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - pyspark raises bare errors for a dead JVM
        raise SparkUnavailableError(
            f"could not start Spark for master {master}: {exc}; PySpark needs Java "
            f"{JAVA_MIN_MAJOR}+ (JAVA_HOME={os.environ.get('JAVA_HOME', '<unset>')})"
        ) from exc
    session.sparkContext.setLogLevel("ERROR")
    return session


def _wait_for_executors(session: Any, master: str, clock: Clock) -> None:
    """On a cluster, wait until an executor registers: a job would otherwise hang."""
    if _LOCAL.match(master):
        return
    deadline = Deadline.after(clock, EXECUTOR_WAIT_S)
    status = session.sparkContext._jsc.sc().getExecutorMemoryStatus()
    while status.size() <= 1:  # the driver counts as one
        if deadline.expired():
            session.stop()
            raise SparkUnavailableError(
                f"Spark master {master} granted no executor in {EXECUTOR_WAIT_S:.0f}s; "
                "check that its workers are alive and have free cores and memory")
        clock.sleep(0.2)
        status = session.sparkContext._jsc.sc().getExecutorMemoryStatus()


def spark_failure(exc: BaseException) -> str:
    """The useful line of a Spark job failure (the Python error, not the JVM trace)."""
    text = str(exc)
    found = re.findall(r"^\S*(?:Error|Exception): .*$", text, flags=re.MULTILINE)
    python = [line for line in found if not line.startswith(("org.", "java.", "py4j."))]
    line = (python or found or [text.strip().splitlines()[0] if text.strip() else repr(exc)])
    return str(line[-1])[:1000]
