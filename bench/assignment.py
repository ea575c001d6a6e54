"""Time the assignor on 10,000 tasks over 500 processors (target: under a second each).

Run: ``.venv/bin/python bench/assignment.py [--tasks N] [--processors P] [--repeat R]``.
A script, not a timed test: the shared CI machines are too noisy for a time assertion.
Prints the best and median wall time of each scenario:

- fresh: no previous assignment, no lags (every task is new);
- scale-out: 90% of the processors hold every task, 10% join (1 standby per task, lags
  reported for the standbys, mixed capacities 1-4);
- follow-up: the scale-out's second call, its warmups caught up;
- failover: a tenth of the processors is gone, standbys with small lags take over.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from orchestrator.core.assignment import (
    Assignment,
    AssignmentConfig,
    ProcessorSnapshot,
    TaskInfo,
    assign,
)

__all__ = ["main"]


def _tasks(count: int) -> list[TaskInfo]:
    """Stateful tasks, with every tenth one stateless."""
    return [TaskInfo(f"task-{k:05d}", stateful=k % 10 != 9) for k in range(count)]


def _scale_out(tasks: list[TaskInfo], procs: int) -> list[ProcessorSnapshot]:
    """90% of the processors hold the tasks round-robin, standbys on the next one."""
    old = procs - procs // 10
    active: list[list[str]] = [[] for _ in range(procs)]
    standby: list[list[str]] = [[] for _ in range(procs)]
    lags: list[dict[str, int]] = [{} for _ in range(procs)]
    for k, task in enumerate(tasks):
        active[k % old].append(task.name)
        if task.stateful:
            j = (k + 1) % old
            standby[j].append(task.name)
            lags[j][task.name] = (k * 37) % 2000
    return [ProcessorSnapshot(f"p{j:04d}", capacity=1 + j % 4, active=frozenset(active[j]),
                           standby=frozenset(standby[j]), lags=lags[j])
            for j in range(procs)]


def _follow_up(previous: list[ProcessorSnapshot], result: Assignment) -> list[ProcessorSnapshot]:
    """The next call's input: the result as previous roles, its warmups caught up."""
    by_id = {p.id: p for p in previous}
    nxt = []
    for p in result.processors:
        lags = dict(by_id[p.id].lags) | {t: 0 for t in p.warmup}
        nxt.append(ProcessorSnapshot(p.id, by_id[p.id].capacity, frozenset(p.active),
                                  frozenset(p.standby), frozenset(p.warmup), lags))
    return nxt


def _time(run: Callable[[], Assignment], repeat: int) -> tuple[float, float, Assignment]:
    """Best and median seconds over ``repeat`` runs, and the last result."""
    times = []
    result = run()
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios and print one line each; exit 1 if one takes a second or more."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--processors", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    tasks = _tasks(args.tasks)
    config = AssignmentConfig(num_standbys=1, max_warmups=2)
    scale_out = _scale_out(tasks, args.processors)
    second = _follow_up(scale_out, assign(tasks, scale_out, config))
    survivors = scale_out[args.processors // 10:]
    fresh = [ProcessorSnapshot(f"p{j:04d}") for j in range(args.processors)]
    scenarios: list[tuple[str, Callable[[], Assignment]]] = [
        ("fresh", lambda: assign(tasks, fresh, config)),
        ("scale-out", lambda: assign(tasks, scale_out, config)),
        ("follow-up", lambda: assign(tasks, second, config)),
        ("failover", lambda: assign(tasks, survivors, config)),
    ]
    print(f"{args.tasks} tasks, {args.processors} processors, num_standbys 1, "
          f"max_warmups 2, best/median of {args.repeat}:")
    slow = False
    for name, run in scenarios:
        best, median, result = _time(run, args.repeat)
        slow |= best >= 1.0
        warmups = sum(len(p.warmup) for p in result.processors)
        print(f"  {name:<10} best {best * 1000:7.1f} ms  median {median * 1000:7.1f} ms  "
              f"(warmups {warmups}, follow_up {result.follow_up})")
    return 1 if slow else 0


if __name__ == "__main__":
    raise SystemExit(main())
