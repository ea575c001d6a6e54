"""bench/soak.py's samples: what each daemon holds (RSS, open fds, threads, librdkafka
clients, open store files) every few seconds, the CSV of them, their picture, and each
daemon's figures.

A daemon restarted under the same name (a processor SIGKILLed and started again, a
coordinator after a failover) is a new process: it gets a label of its own ("p3#2" for
p3's second start), since its memory starts over.

Which samples the figures compare: a daemon's fds and RSS depend on the tasks it holds
(each store keeps a few files open, each active task a transactional producer) and a
coordinator's on whether it leads, so the start and end figures are two samples taken
in the same shape of the job: balanced, with the same processors alive, the daemon in
the same role (holding tasks; leading or standing by) and up for at least `SETTLE_S`.
The end is its last such sample; the start is its first one in the slope window (which
starts after the first ten minutes, or at half the run for runs under 20 minutes), else
its first one at all.

The RSS slope is a rate per hour after warm-up, so it is each daemon's own warm-up that
it skips: its samples count once the run is past the window's start and the daemon has
been up that long too (a coordinator started by a failover at minute 30 warms up from
minute 30). A daemon with less than half a window of such samples has no slope (None):
a few minutes of a fresh daemon's start-up, read as an hourly rate, said +62 to +85
MB/hour.
"""

from __future__ import annotations

import csv
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

__all__ = ["QUIET_S", "SETTLE_S", "Sample", "Sampler", "daemon_figures", "draw", "slope_window"]

# a daemon's first seconds (imports, its clients' start, its first tasks' stores opened)
# are its start-up, not its steady state; its memory keeps growing a while longer (the
# allocator's arenas, the block cache filling), so the slope skips its own warm-up
SETTLE_S = 10.0
_WARM_S = 600.0             # runs of 20 minutes or more: the slope after 10 minutes
# a daemon doing its job: a processor holding tasks, a coordinator leading or standing by
# (not a processor drained of its tasks and on its way out)
_STEADY_ROLES = ("active", "leader", "standby")
_NO_FLOOR = 1 << 30         # a daemon with no sample of the shape yet: nothing to wait for
# how long every daemon's count of librdkafka clients must hold still, the job balanced,
# for the end sample to be taken above a daemon's floor (`Sampler.settle_clients`): a
# replaced producer tries to end its transaction for up to 60 s before it closes
QUIET_S = 75.0


@dataclass(frozen=True)
class Sample:
    """One daemon at one moment: `t` seconds from the run's start."""

    t: float
    daemon: str
    pid: int
    age_s: float
    rss_mb: float
    fds: int
    threads: int
    kafka_clients: int      # librdkafka clients: each runs one "rdk:main" thread
    store_files: int
    balanced: bool
    processors: str         # the processors alive then, "+"-joined (the job's shape)
    role: str               # active, idle or gone; leader or standby (Churn.shape)


def _status_fields(pid: int) -> tuple[float, int] | None:
    """(VmRSS in MB, Threads) of a live process; None once it has gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    values = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        return int(values["VmRSS"].split()[0]) / 1024, int(values["Threads"])
    except (KeyError, ValueError, IndexError):
        return None         # a zombie has no VmRSS


def _kafka_clients(pid: int) -> int:
    """librdkafka clients alive in a process (a thread count alone does not say whether
    more clients or more threads per client)."""
    count = 0
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for thread in threads:
        try:
            count += Path(f"/proc/{pid}/task/{thread}/comm").read_text().strip() == "rdk:main"
        except OSError:
            continue                # the thread ended meanwhile
    return count


def _fds(pid: int, state_dir: Path) -> tuple[int, int] | None:
    """(open fds, those pointing into `state_dir`: store files, .sst among them)."""
    root = f"/proc/{pid}/fd"
    try:
        names = os.listdir(root)
    except OSError:
        return None
    inside = 0
    prefix = str(state_dir) + os.sep
    for name in names:
        try:
            if os.readlink(f"{root}/{name}").startswith(prefix):
                inside += 1
        except OSError:
            continue                # closed meanwhile
    return len(names), inside


class Sampler:
    """Samples every daemon `daemons()` names ({label: (pid, started monotonic)}) each
    `every` seconds on a thread of its own; `shape()` says whether the job is balanced,
    which processors are alive and each daemon's role (the status poller's last answer)."""

    def __init__(self, daemons: Callable[[], dict[str, tuple[int, float]]],
                 shape: Callable[[], tuple[bool, str, dict[str, str]]], state_dir: Path,
                 every: float = 10.0) -> None:
        self.samples: list[Sample] = []
        self.started = time.monotonic()
        self._daemons, self._shape, self._state_dir = daemons, shape, state_dir
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def sample(self) -> None:
        """One sample of every live daemon now."""
        now = time.monotonic()
        balanced, processors, roles = self._shape()
        for label, (pid, started) in sorted(self._daemons().items()):
            status, fds = _status_fields(pid), _fds(pid, self._state_dir)
            if status is None or fds is None:
                continue
            self.samples.append(Sample(round(now - self.started, 1), label, pid,
                                       round(now - started, 1), round(status[0], 1),
                                       fds[0], status[1], _kafka_clients(pid), fds[1],
                                       balanced, processors,
                                       roles.get(label.split("#")[0], "")))

    def settle_clients(self, timeout_s: float, quiet_s: float = QUIET_S) -> None:
        """Wait, up to `timeout_s`, until every live daemon holds no more librdkafka
        clients than in its fewest-client balanced sample of the job's current shape
        in its current role, or until the job is balanced and no daemon's count of
        clients has changed for `quiet_s`.
        After a broker restart a processor's replaced producers close on threads of
        their own for up to a minute (processor/runtime/producer_close.py); an end
        sample taken meanwhile counts their sockets as if they had leaked. A daemon may
        also keep one client above its floor for good without leaking: one it makes at
        its first need and keeps (a processor's read_uncommitted lookup consumer, made
        at its first fenced or void commit: processor/runtime/lookups.py). And on a
        loaded host, transactions the broker timed out fence tasks after the last
        operation: new producers start while the fenced ones close. So the wait ends
        once the counts hold still, not at a fixed time that may fall in the middle of
        such a change. A client that never goes holds still too: the end sample holds it."""
        _, processors, roles = self._shape()
        floor: dict[str, int] = {}
        for s in self.samples:      # a leading coordinator holds more than a standby
            if (s.balanced and s.processors == processors
                    and s.role == roles.get(s.daemon.split("#")[0], "")):
                floor[s.daemon] = min(floor.get(s.daemon, s.kafka_clients), s.kafka_clients)
        deadline = time.monotonic() + timeout_s
        last: dict[str, int] = {}
        still_since = time.monotonic()
        while (now := time.monotonic()) < deadline:
            counts = {label: _kafka_clients(pid)
                      for label, (pid, _) in self._daemons().items()}
            if all(n <= floor.get(label, _NO_FLOOR) for label, n in counts.items()):
                return
            if counts != last or not self._shape()[0]:
                last, still_since = counts, now
            elif now - still_since >= quiet_s:
                return
            time.sleep(1.0)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.sample()

    def write_csv(self, path: Path) -> None:
        with path.open("w", newline="") as out:
            writer = csv.DictWriter(out, [f.name for f in fields(Sample)])
            writer.writeheader()
            writer.writerows(asdict(s) for s in self.samples)


def slope_window(seconds: float) -> float:
    """When the slope window starts, in seconds from the run's start: after the first
    ten minutes, or at half the run for runs under 20 minutes."""
    return _WARM_S if seconds >= 2 * _WARM_S else seconds / 2


def _slope_mb_per_hour(samples: list[Sample], least_s: float) -> float | None:
    """Least-squares RSS slope over the samples; None under 3 samples or `least_s`."""
    if len(samples) < 3 or samples[-1].t - samples[0].t < least_s:
        return None
    ts = [s.t / 3600 for s in samples]
    ys = [s.rss_mb for s in samples]
    mean_t, mean_y = sum(ts) / len(ts), sum(ys) / len(ys)
    spread = sum((t - mean_t) ** 2 for t in ts)
    return sum((t - mean_t) * (y - mean_y) for t, y in zip(ts, ys, strict=True)) / spread


def daemon_figures(samples: list[Sample], window_s: float) -> list[dict[str, Any]]:
    """Per daemon, in order of first sample: the pinned figures (see the module's
    docstring for which samples they compare). A daemon with no sample in a steady
    shape (one that lived a few seconds, or only while the job was moving) has nothing
    to compare and is left out."""
    labels = list(dict.fromkeys(s.daemon for s in samples))
    out = []
    for label in labels:
        mine = [s for s in samples if s.daemon == label]
        settled = [s for s in mine if s.balanced and s.role in _STEADY_ROLES
                   and s.t - _role_since(mine, s) >= SETTLE_S and s.age_s >= SETTLE_S]
        if not settled:
            continue
        end = settled[-1]
        alike = [s for s in settled if (s.processors, s.role) == (end.processors, end.role)]
        start = next((s for s in alike if s.t >= window_s), alike[0])
        slope = _slope_mb_per_hour([s for s in mine if s.t >= window_s
                                    and s.age_s >= window_s], window_s / 2)
        out.append({"name": label,
                    "rss_mb_start": start.rss_mb, "rss_mb_end": end.rss_mb,
                    "rss_slope_mb_per_hour": None if slope is None else round(slope, 1),
                    "fds_start": start.fds, "fds_end": end.fds,
                    "threads_start": start.threads, "threads_end": end.threads})
    return out


def _role_since(mine: list[Sample], sample: Sample) -> float:
    """When `sample`'s daemon took the role it has in it: a standby that has just taken
    over opens its leader's clients in its first seconds as the leader, which are its
    start-up in that role, as a new daemon's first seconds are."""
    role, since = mine[0].role, mine[0].t
    for earlier in mine:
        if earlier.t > sample.t:
            break
        if earlier.role != role:
            role, since = earlier.role, earlier.t
    return since


def draw(samples: list[Sample], operations: list[tuple[float, str]], path: Path,
         title: str) -> None:
    """Five panels over time (RSS, fds, threads, librdkafka clients, store files), a line
    per daemon life, coloured by its name, the operations marked as vertical lines."""
    import matplotlib

    matplotlib.use("Agg")           # no display: a file only
    import matplotlib.pyplot as plt

    panels: list[tuple[Callable[[Sample], float], str]] = [
        (lambda s: s.rss_mb, "RSS (MB)"), (lambda s: s.fds, "open fds"),
        (lambda s: s.threads, "threads"), (lambda s: s.kafka_clients, "Kafka clients"),
        (lambda s: s.store_files, "open store files")]
    figure, axes = plt.subplots(len(panels), 1, figsize=(11, 13), sharex=True)
    labels = list(dict.fromkeys(s.daemon for s in samples))
    # one colour per name: a daemon restarted under it ("p3#2") continues its line's
    # colour, and the legend names each daemon once
    names = list(dict.fromkeys(label.split("#")[0] for label in labels))
    colours = {n: f"C{i % 10}" for i, n in enumerate(names)}
    for axis, (value, name) in zip(axes, panels, strict=True):
        for label in labels:
            mine = [s for s in samples if s.daemon == label]
            base = label.split("#")[0]
            axis.plot([s.t / 60 for s in mine], [value(s) for s in mine],
                      marker=".", markersize=3, linewidth=1, color=colours[base],
                      label=base if label == base else None)
        for at, _ in operations:
            axis.axvline(at / 60, color="grey", linewidth=0.5, alpha=0.5)
        axis.set_ylabel(name)
        axis.grid(alpha=0.3)
    for at, operation in operations:
        axes[0].annotate(operation, (at / 60, 1), xycoords=("data", "axes fraction"),
                         rotation=90, fontsize=6, color="grey", va="top", ha="right")
    axes[0].legend(loc="lower right", fontsize="small", ncol=len(names))
    axes[0].set_title(title)
    axes[-1].set_xlabel("minutes (grey lines: the operations, named in the first panel)")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
