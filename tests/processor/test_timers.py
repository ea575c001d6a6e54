"""Timers on the task store (processor/timers.py): stream-time timers fire before the
record that passes them, once, with its outputs, the same on every replay; a record that
raises moves no clock; wall-clock timers fire when told, only where allowed; a split
child's replay fires its keys' timers where the parent did."""

from __future__ import annotations

import random
import zlib
from collections import defaultdict
from collections.abc import Iterator

import pytest

from processor import Context, Emitted, Job, Output, Record, State, Timer
from processor.testing import JobHarness, run_job
from processor.timed_job import TimedJob
from processor.timers import RESERVED, TimerError, Timers, child_timer_key
from tests.processor.timer_jobs import GAP_MS, Gaps, expected_outputs


def _records(seed: int, n: int, partitions: int = 2, keys: int = 6) -> list[Record]:
    """Keyed records over `partitions` (each key on one), timestamps mostly rising with
    gaps past GAP_MS and some out of order."""
    rng = random.Random(seed)
    stamp, offsets, made = 1_000, [0] * partitions, []
    for _ in range(n):
        if rng.random() < 0.9:
            stamp += rng.choice([1, 20, 90, GAP_MS - 1, GAP_MS, 2 * GAP_MS])
        else:
            stamp -= rng.randint(0, 2 * GAP_MS)
        k = rng.randrange(keys)
        p = k % partitions
        made.append(Record(b"k%d" % k, b"", "input", p, offsets[p], stamp))
        offsets[p] += 1
    return made


def _by_key(outputs: list[Output]) -> dict[bytes, list[str]]:
    got: dict[bytes, list[str]] = defaultdict(list)
    for out in outputs:
        assert out.key is not None and out.value is not None
        got[out.key].append(out.value.decode())
    return dict(got)


def _expected(records: list[Record]) -> dict[bytes, list[str]]:
    return dict(expected_outputs((r.partition, r.key, r.offset, r.timestamp)
                                 for r in records))


@pytest.mark.parametrize("commit_every", [1, 7, 1000])
def test_timers_fire_by_each_partition_s_clock_as_the_rules_say(commit_every: int) -> None:
    records = _records(1, 600)
    run = run_job(Gaps, records, commit_every=commit_every)
    expected = _expected(records)
    assert _by_key(run.outputs) == expected
    closed = sum(v.startswith("closed") for vs in expected.values() for v in vs)
    assert 50 < closed < 500                  # runs closed, by records of other keys too


def test_a_replay_fires_the_same_timers_and_leaves_the_same_state() -> None:
    records = _records(2, 400)
    owner = run_job(Gaps, records, commit_every=5)
    replay = run_job(Gaps, records, commit_every=50, replaying=True)
    assert replay.state == owner.state and replay.outputs == owner.outputs


def test_a_timer_fires_once_before_the_record_that_passes_it_with_its_outputs() -> None:
    with JobHarness(Gaps) as harness:
        assert [o.value for o in harness.send(Record(b"a", b"", "input", 0, 0, 1_000))] \
            == [b"n:1"]
        assert harness.timers() == [("input:0", 1_000 + GAP_MS, b"a", "")]
        # another key's record short of the time fires nothing; one at the time fires it
        assert [o.value for o in harness.send(Record(b"b", b"", "input", 0, 1, 1_399))] \
            == [b"n:1"]
        at = harness.send(Record(b"b", b"", "input", 0, 2, 1_400))
        assert [(o.key, o.value, o.timestamp) for o in at] == [
            (b"a", b"closed:1@1400", 1_400), (b"b", b"n:2", 1_400)]
        # the other partition's clock is its own
        assert harness.send(Record(b"c", b"", "input", 1, 0, 9_000))[0].value == b"n:1"
        assert [t[2] for t in harness.timers()] == [b"b", b"c"]
        late = harness.send(Record(b"d", b"", "input", 0, 3, 1_000))    # out of order
        assert [o.value for o in late] == [b"n:1"]
        assert b"a" not in harness.state


class Remind(Job):
    """Sets a timer at a time the clock has passed: due before the partition's next
    record. Raises on a value "bad" after setting one."""

    def setup(self, context: Context) -> None:
        self.timers = context.timers

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        self.timers.at(record.timestamp - 10, name=str(record.offset))
        if record.value == b"bad":
            raise ValueError("bad")
        yield record.key, b"seen"

    def on_timer(self, timer: Timer, state: State) -> Iterator[Emitted]:
        yield timer.key, f"{timer.name}@{timer.time}"


def test_a_timer_already_due_fires_before_the_partition_s_next_record() -> None:
    with JobHarness(Remind, on_error="skip") as harness:
        assert [o.value for o in harness.send(Record(b"a", b"", "input", 0, 0, 100))] \
            == [b"seen"]
        assert [o.value for o in harness.send(Record(b"b", b"", "input", 1, 0, 100))] \
            == [b"seen"]                        # another partition: not yet
        # it fires before the record, which raises: its writes are undone, the firing
        # too, so the timer fires again before the next one
        assert harness.send(Record(b"a", b"bad", "input", 0, 1, 500)) == []
        assert [o.value for o in harness.send(Record(b"a", b"", "input", 0, 2, 50))] \
            == [b"0@90", b"seen"]
        assert len(harness.run.failed) == 1


def test_a_record_that_raises_moves_no_clock() -> None:
    with JobHarness(Gaps, on_error="skip") as harness:
        harness.send(Record(b"a", b"", "input", 0, 0, 1_000))
        harness.send(Record(None, b"", "input", 0, 1, 5_000))        # Gaps raises on it
        assert harness.send(Record(b"b", b"", "input", 0, 2, 1_001))[0].value == b"n:1"
        assert [t[2] for t in harness.timers()] == [b"a", b"b"]


def test_an_abort_drops_the_timers_of_its_transaction() -> None:
    with JobHarness(Gaps, commit_every=100) as harness:
        harness.send(Record(b"a", b"", "input", 0, 0, 1_000))
        harness.commit()
        harness.send(Record(b"b", b"", "input", 0, 1, 1_100))
        harness.abort()
        assert [t[2] for t in harness.timers()] == [b"a"]


class Fails(Gaps):
    def on_timer(self, timer: Timer, state: State) -> Iterator[Emitted]:
        raise RuntimeError("boom")


def test_on_timer_raising_stops_the_task_whatever_on_error_says() -> None:
    with JobHarness(Fails, on_error="skip") as harness:
        harness.send(Record(b"a", b"", "input", 0, 0, 1_000))
        with pytest.raises(TimerError, match=r"on_timer\(\) raised .* b'a'.*boom"):
            harness.send(Record(b"a", b"", "input", 0, 1, 2_000))


class Wall(Job):
    def setup(self, context: Context) -> None:
        self.timers = context.timers

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        self.timers.at_wall(int(record.value or 0), name="due")
        state[record.key] = "waiting"
        return iter(())

    def on_timer(self, timer: Timer, state: State) -> Iterator[Emitted]:
        state[timer.key] = f"fired {timer.name} at {timer.time}"
        yield timer.key, "reminder"


def test_wall_clock_timers_fire_when_the_owner_s_clock_reaches_them() -> None:
    with JobHarness(Wall, key_format="str") as harness:
        harness.send(("a", "5000"))
        harness.send(("b", "7000"))
        assert harness.fire_wall_timers(4_999) == []
        assert [(o.key, o.timestamp) for o in harness.fire_wall_timers(6_000)] == \
            [(b"a", 6_000)]
        assert harness.state == {"a": "fired due at 5000", "b": "waiting"}
        assert harness.fire_wall_timers(6_000) == []
        assert [o.key for o in harness.fire_wall_timers(10_000)] == [b"b"]


def test_wall_clock_timers_are_refused_where_a_replay_rebuilds_the_state() -> None:
    timers = Timers(wall=False)
    job = TimedJob(Wall(), timers)
    Wall.setup(job.inner, Context("j", "t", (), "p", "warmup", timers=timers))
    with JobHarness(job) as harness:
        with pytest.raises(TimerError, match="catch_up.source"):
            harness.send(("a", "5000"))


def test_timers_are_set_from_process_or_on_timer_only() -> None:
    timers = Timers()
    with pytest.raises(TimerError, match="from process"):
        timers.at(5)
    with pytest.raises(TypeError, match="int"):
        timers._enter({}, "input:0", None, None)       # type: ignore[arg-type]
        timers.at(5.5)                                  # type: ignore[arg-type]


class StrGaps(Gaps):
    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        assert isinstance(record.key, str)
        yield from super().process(record, state)

    def on_timer(self, timer: Timer, state: State) -> Iterator[Emitted]:
        assert isinstance(timer.key, str)
        yield from super().on_timer(timer, state)


def test_a_timer_s_key_is_the_key_as_process_sees_it() -> None:
    run = run_job(StrGaps, [Record(b"a", b"", "input", 0, 0, 1), Record(
        b"b", b"", "input", 0, 1, 1_000)], key_format="str")
    assert [(o.key, o.value) for o in run.outputs] == [
        (b"a", b"n:1"), (b"a", b"closed:1@401"), (b"b", b"n:1")]
    assert run.state == {"b": [1, 1_400]}


def _home(key: bytes, count: int) -> int:
    return zlib.crc32(key) % count          # consistent_random's


def test_a_split_child_fires_its_keys_timers_where_the_parent_did() -> None:
    """Parent t:0 (2 partitions grow to 4: child t:2). The parent reads t:0 to its
    barrier, moves its child keys' timers at the marker, then reads t:2 (embedded) and
    t:0 on. The child replays t:0 through its key filter (other keys pass over), then
    its own t:2. The child's keys' outputs and state are the parent's."""
    rng = random.Random(5)
    keys = [b"u%d" % i for i in range(40) if _home(b"u%d" % i, 2) == 0]
    child_keys = {k for k in keys if _home(k, 4) == 2}
    assert child_keys and len(child_keys) < len(keys)
    stamp, before = 10_000, []
    for offset in range(300):
        stamp += rng.choice([5, 40, 150, GAP_MS + 50])
        late = rng.randint(0, 2 * GAP_MS) if rng.random() < 0.3 else 0   # out of order
        before.append(Record(rng.choice(keys), b"", "t", 0, offset, stamp - late))
    after_a, after_c = [], []          # past the barrier, keys split by their new home
    c_stamp = stamp - 20 * GAP_MS      # the child partition's first records are older
    for offset in range(300, 600):
        key = rng.choice(keys)
        stamp += rng.choice([5, 40, 150, GAP_MS + 50])
        c_stamp += rng.choice([5, 40, 150, GAP_MS + 50])
        if key in child_keys:
            after_c.append(Record(key, b"", "t", 2, len(after_c), c_stamp))
        else:
            after_a.append(Record(key, b"", "t", 0, offset, stamp))

    with JobHarness(Gaps) as parent, JobHarness(Gaps) as child:
        assert isinstance(parent.job, TimedJob) and isinstance(child.job, TimedJob)
        for record in before:
            parent.send(record)
        parent.job.rehome("t:0", ["t:2"], 4, parent.store.state)
        for a, c in zip(after_a, after_c, strict=False):   # interleaved, as consumed
            parent.send(c)
            parent.send(a)
        for record in after_c[len(after_a):]:
            parent.send(record)

        child.job.lineage = {"t:2": ["t:0"]}
        seen: dict[bytes, list[str]] = defaultdict(list)
        for record in before:
            if record.key in child_keys:
                fired = [(o.key, o.value) for o in child.send(record)]
            else:           # what it fires is thrown away by a replay; kept here to compare
                fired = child.job.pass_over(record, child.store.state)  # type: ignore[assignment]
            for key, value in fired:
                seen[key].append(value if isinstance(value, str) else value.decode())
        for record in after_c:
            for out in child.send(record):
                seen[out.key].append(out.value.decode())  # type: ignore[union-attr]

        mine = {k: v for k, v in _by_key(parent.run.outputs).items() if k in child_keys}
        assert dict(seen) == mine
        assert sum(v.startswith("closed") for vs in mine.values() for v in vs) > 20
        assert {k: v for k, v in parent.state.items() if k in child_keys} == child.state
        # the parent's store drops the child partition's clock and timers, and no other
        held = [k for k in parent.store.state if isinstance(k, bytes)
                and k.startswith(RESERVED)]
        dropped = [k for k in held if child_timer_key(k, ["t:2"])]
        assert dropped and all(b"t:2" in k for k in dropped)
        assert all(child_timer_key(k, ["t:2"]) is False for k in held if k not in dropped)
        assert child_timer_key(b"u1", ["t:2"]) is None
