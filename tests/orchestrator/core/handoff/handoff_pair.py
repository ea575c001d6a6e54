"""The pair harness: a coordinator's handoff driver and two fake processors on an
in-memory bus (the input partition, the committed offset, the transactional id),
interleavings forced step by step; tests/orchestrator/core/handoff/test_handoff_pair.py
drives it."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from orchestrator.core.handoff import (
    Activated,
    Cancel,
    Command,
    DeclareDead,
    Event,
    Handoff,
    HandoffConfig,
    LagReported,
    LocalHandoffError,
    Persist,
    ProcessorLost,
    ReleaseAcked,
    RemoteHandoffError,
    ResumeOwner,
    SendActivate,
    SendRelease,
    StartWarmup,
    StopWarmup,
    Tick,
    WarmupStarted,
    next_deadline,
    plan,
    resume,
    step,
)
from tests.clocks import FakeClock
from tests.orchestrator.core.handoff.handoff_support import (
    OTHER,
    TASK,
    S,
    T,
)

PART = "events:0"
VALUES = list(range(1, 31))
EXPECTED = [(i, sum(VALUES[: i + 1])) for i in range(len(VALUES))]  # one processor's output
PAIR_CFG = HandoffConfig(acceptable_lag=2, release_timeout_s=10.0, activate_timeout_s=30.0,
                         catch_up_timeout_s=60.0)


class FakeKafka:
    """One input partition, the group's committed offset, and the task's transactional id."""

    def __init__(self) -> None:
        self.committed = 0
        self.epoch = 0
        self.output: list[tuple[int, int, str]] = []  # (input offset, running sum, writer)

    def init_transactions(self) -> int:
        self.epoch += 1  # fences every earlier producer of the task
        return self.epoch

    def commit(self, epoch: int, outputs: list[tuple[int, int, str]], next_offset: int) -> bool:
        if epoch != self.epoch:
            return False
        self.output += outputs
        self.committed = next_offset
        return True


class FakeProcessor:
    """A processor running the running-sum job on the one task: roles, store, producer."""

    def __init__(self, pid: str, kafka: FakeKafka, active: bool = False) -> None:
        self.pid, self.kafka = pid, kafka
        self.applied, self.total, self.epoch = 0, 0, -1  # the store: T2 and the state
        self.role = "idle"
        self.inbox: deque[Command] = deque()
        self.outbox: deque[Event] = deque()
        if active:
            self.epoch, self.role = kafka.init_transactions(), "active"

    def replay(self, end: int) -> None:
        """Apply records up to `end` to the store, without output."""
        assert self.applied <= end, f"{self.pid}'s store is past {end}"
        self.total += sum(VALUES[self.applied:end])
        self.applied = end

    def warm(self, n: int) -> None:
        if self.role == "warmup":
            self.replay(min(self.applied + n, self.kafka.committed))

    def process(self, n: int) -> None:
        """One transaction of up to n records; a fenced producer stops the task."""
        if self.role != "active":
            return
        end, total, outputs = min(self.applied + n, len(VALUES)), self.total, []
        for offset in range(self.applied, end):
            total += VALUES[offset]
            outputs.append((offset, total, self.pid))
        if self.kafka.commit(self.epoch, outputs, end):
            self.applied, self.total = end, total
        else:
            self.role = "fenced"

    def receive(self) -> None:
        """One heartbeat reply: alive: false wins over everything else queued."""
        if self.role in ("crashed", "dead") or any(isinstance(c, DeclareDead) for c in self.inbox):
            self.inbox.clear()
            self.role = "crashed" if self.role == "crashed" else "dead"
            return
        while self.inbox:
            self.handle(self.inbox.popleft())

    def handle(self, command: Command) -> None:
        if isinstance(command, StartWarmup) and self.role in ("idle", "warmup"):
            self.role = "warmup"
            self.outbox.append(WarmupStarted(self.pid))
        elif isinstance(command, StopWarmup) and self.role == "warmup":
            self.role = "idle"
        elif isinstance(command, SendRelease) and self.role in ("active", "released"):
            self.role = "released"  # process() commits per call: nothing open to commit
            self.outbox.append(ReleaseAcked({PART: self.applied}, self.pid))
        elif isinstance(command, SendActivate) and self.role in ("idle", "warmup"):
            self.epoch = self.kafka.init_transactions()
            end = self.kafka.committed
            if command.final_offsets is not None:
                assert command.final_offsets[PART] == end, "source wrote after its release"
            self.replay(end)
            self.role = "active"
            self.outbox.append(Activated(self.pid))
        elif isinstance(command, SendActivate) and self.role == "active":
            self.outbox.append(Activated(self.pid))
        elif isinstance(command, ResumeOwner) and self.role in ("released", "fenced"):
            self.epoch = self.kafka.init_transactions()
            self.replay(self.kafka.committed)
            self.role = "active"

    def crash(self) -> None:
        self.role = "crashed"
        self.inbox.clear()
        self.outbox.clear()


class Core:
    """The coordinator's handoff driver: feeds events to step() and executes commands."""

    def __init__(self, clock: FakeClock, procs: dict[str, FakeProcessor]) -> None:
        self.clock, self.procs = clock, procs
        self.handoff: Handoff | None = None
        self.stream: list[str] = []  # the coordinator stream
        self.errors: list[Exception] = []
        self.declared: set[str] = set()  # executions invalidated (liveness state)

    def execute(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, Persist):
                self.stream.append(json.dumps(command.handoff.to_dict()))
                continue
            if isinstance(command, DeclareDead):
                self.declared.add(command.processor)
            if isinstance(command, SendActivate | ResumeOwner):  # one writer at a time
                writers = [pid for pid, proc in self.procs.items() if proc.role == "active"
                           and pid != command.processor and pid not in self.declared]
                assert not writers, f"{command} while {writers} may still write"
            self.procs[command.processor].inbox.append(command)

    def plan(self, source: str | None, target: str) -> None:
        self.handoff, commands = plan(TASK, source, target, self.clock.monotonic())
        self.execute(commands)

    def feed(self, event: Event) -> None:
        assert self.handoff is not None
        try:
            self.handoff, commands = step(self.handoff, event, PAIR_CFG, self.clock.monotonic())
        except (RemoteHandoffError, LocalHandoffError) as error:
            self.errors.append(error)  # logged and dropped; the handoff is unchanged
            return
        self.execute(commands)

    def collect(self, pid: str) -> None:
        outbox = self.procs[pid].outbox
        while outbox:
            self.feed(outbox.popleft())

    def report_lag(self) -> None:
        target = self.procs[self.handoff.target] if self.handoff else None
        if target is not None and target.role == "warmup":
            self.feed(LagReported(target.kafka.committed - target.applied))

    def lose(self, pid: str) -> None:
        """The liveness layer gives up on `pid`: its heartbeat answers alive: false."""
        self.procs[pid].inbox.append(DeclareDead(pid))
        self.declared.add(pid)
        if self.handoff is not None:
            self.feed(ProcessorLost(pid))

    def timeout(self) -> None:
        deadline = next_deadline(self.handoff, PAIR_CFG) if self.handoff else None
        if deadline is not None:
            self.clock.jump_to(deadline)
            self.feed(Tick(self.clock.monotonic()))

    def restart(self) -> Core:
        """A new coordinator process: reads the stream, resumes; replies in flight are lost."""
        fresh = Core(self.clock, self.procs)
        fresh.stream, fresh.declared = self.stream, self.declared
        for proc in self.procs.values():
            proc.outbox.clear()
        fresh.handoff, commands = resume(Handoff.from_dict(json.loads(self.stream[-1])),
                                         self.clock.monotonic())
        fresh.execute(commands)
        return fresh


class Pair:
    """Coordinator core + p1 (the owner) + p2, stepped by a script: one action per line.

    Actions: `plan`, `pN recv` (heartbeat reply to pN), `pN send` (pN's reports reach the
    coordinator), `pN process K`, `p2 warm K`, `lag`, `wait S`, `timeout`, `pN crash`,
    `lose pN`, `cancel`, `restart`.
    """

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.kafka = FakeKafka()
        self.procs = {S: FakeProcessor(S, self.kafka, active=True),
                      T: FakeProcessor(T, self.kafka),
                      OTHER: FakeProcessor(OTHER, self.kafka)}
        self.core = Core(self.clock, self.procs)

    def run(self, script: str) -> Pair:
        for line in filter(None, (raw.split("#")[0].strip() for raw in script.splitlines())):
            self.act(*line.split())
        return self

    def act(self, verb: str, *args: str) -> None:
        core = self.core
        if verb == "plan":
            core.plan(S, T)
        elif verb in self.procs:
            proc, what = self.procs[verb], args[0]
            if what == "recv":
                proc.receive()
            elif what == "send":
                core.collect(verb)
            elif what == "process":
                proc.process(int(args[1]))
            elif what == "warm":
                proc.warm(int(args[1]))
            else:
                assert what == "crash", what
                proc.crash()
        elif verb == "lag":
            core.report_lag()
        elif verb == "wait":
            self.clock.advance(float(args[0]))
            core.feed(Tick(self.clock.monotonic()))
        elif verb == "timeout":
            core.timeout()
        elif verb == "lose":
            core.lose(args[0])
        elif verb == "cancel":
            core.feed(Cancel("operator"))
        else:
            assert verb == "restart", verb
            self.core = core.restart()

    @property
    def phases(self) -> list[str]:
        return [json.loads(record)["phase"] for record in self.core.stream]

    def writers(self) -> str:
        """Who wrote each output, run-length encoded: 'p1*18 p2*12'."""
        runs: list[list[Any]] = []
        for _, _, writer in self.kafka.output:
            if runs and runs[-1][0] == writer:
                runs[-1][1] += 1
            else:
                runs.append([writer, 1])
        return " ".join(f"{w}*{n}" for w, n in runs)

    def assert_exactly_once(self) -> None:
        assert [(o, v) for o, v, _ in self.kafka.output] == EXPECTED
