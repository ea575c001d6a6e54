"""The active task's sweep of expired entries (processor/expiry_sweep.py): bounded by the
least of its partitions' clocks less the grace, none while a partition has no clock,
a slice at most once an interval, round and round the store (real RocksDB)."""

from __future__ import annotations

from pathlib import Path

from processor.expiry_sweep import ExpirySweep
from store import TaskStore


def test_the_watermark_is_the_least_clock_once_every_partition_has_one() -> None:
    sweep = ExpirySweep()
    assert sweep.watermark(["t:0", "t:1"]) is None
    sweep.saw("t:0", [5, 30, 20])
    assert sweep.watermark(["t:0", "t:1"]) is None      # t:1 idle: no sweep
    sweep.saw("t:1", [10])
    sweep.saw("t:0", [25])                              # older: the clock stays
    assert sweep.clocks == {"t:0": 30, "t:1": 10}
    assert sweep.watermark(["t:0", "t:1", "t:0"]) == 10
    sweep.saw("t:1", [])
    assert sweep.watermark([]) is None


def test_a_sweep_deletes_by_the_bound_once_an_interval_round_the_store(tmp_path: Path
                                                                        ) -> None:
    with TaskStore(tmp_path / "s") as store:
        store.state.now = 0
        for i in range(5):
            store.state.put(f"k{i}", i, ttl_ms=10 + i)         # expire at 10..14
        store.commit({"t:0": 1})
        sweep = ExpirySweep(grace_ms=100, slice_size=2)
        sweep.run(store, ["t:0"], 0.0)                  # no clock yet: nothing
        assert list(store.changes()) == []
        sweep.saw("t:0", [112])                         # bound 12: k0..k2 expired by then
        sweep.run(store, ["t:0"], 10.0)                 # slice 1: k0, k1
        sweep.run(store, ["t:0"], 10.5)                 # within the interval: nothing
        assert [k for k, _ in store.changes()] == [b"\x02k0", b"\x02k1"]
        sweep.run(store, ["t:0"], 11.0)                 # slice 2: k2 (k3 past the bound)
        sweep.run(store, ["t:0"], 12.0)                 # slice 3: k4 not either; the end
        store.commit({"t:0": 2})
        sweep.saw("t:0", [200])
        sweep.run(store, ["t:0"], 13.0)                 # round again from the start
        sweep.run(store, ["t:0"], 14.0)
        assert [k for k, _ in store.changes()] == [b"\x02k3", b"\x02k4"]
        store.commit({"t:0": 3})
        store.state.now = None
        assert list(store.state) == []
