"""bench/soak.py for 3 minutes under churn: the oracle holds, every operation of its
cycle ran, and no daemon's open fds grew.

`./run test` runs it beside its two Kafka sessions. Alone (about 4
minutes with the broker's start and the final checks):

    BATON_TEST_BROKER=kafka .venv/bin/python -m pytest -m soak tests/bench/test_soak.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from soak import lost_inputs  # noqa: E402 - a bench module
from soak_sampling import slope_window  # noqa: E402 - a bench module

# fds a daemon may end with above its start, both sampled in the same balanced shape of
# the job (the same processors alive, so the same tasks held: bench/soak_sampling.py).
# What still moves then without being a leak: each RocksDB store's SST files (a memtable
# flush adds one, a compaction replaces several by one; 4 stores a processor, each
# compacting at 4 level-0 files, so up to 3 more each at a bad moment) and librdkafka's
# broker connections (a client connects lazily to the bootstrap and to the broker by
# its advertised name: one more socket, plus its wake-up pipe, per client that has not
# used it yet). A leak of one fd per handoff, per operation or per transaction outgrows
# this within the run.
FD_SLACK = 16
# and the fds of each librdkafka client it holds at the end above its fewest in that
# shape: a client a daemon makes at its first need and keeps is not a leak (a
# processor's read_uncommitted lookup consumer, made when a stable lookup does not
# answer in time: bench/soak_sampling.py, `Sampler.settle_clients`); on one broker a
# client holds two sockets (bootstrap and broker) and its threads' wake-up fds
FDS_PER_CLIENT = 16


# only `soak`: no other selection (`-m integration` among them) picks this long run up
@pytest.mark.soak
@pytest.mark.timeout(1500)
def test_three_minutes_under_churn(tmp_path: Path) -> None:
    kind = os.environ.get("BATON_TEST_BROKER", "kafka")
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--minutes", "3",
                          "--broker", kind, "--json", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=1400, cwd=ROOT)
    assert run.stdout.strip(), run.stderr[-5000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert list(summary) == ["minutes", "lost", "duplicated", "wrong", "operations",
                             "daemons", "picture"]
    verdict = [line for line in run.stderr.splitlines()
               if line.startswith(("# oracle", "# key", "# lost:"))]
    assert (summary["lost"], summary["duplicated"], summary["wrong"]) == (0, 0, 0), \
        (summary, verdict)
    assert run.returncode == 0, run.stderr[-5000:]
    assert summary["minutes"] >= 3
    operations = summary["operations"]
    assert set(operations) == {"scale_out", "processor_kill", "drain", "expand_split",
                               "failover", "broker_restart"}
    assert all(count >= 1 for count in operations.values()), operations
    names = {d["name"] for d in summary["daemons"]}
    assert {"c0", "c1", "p1", "p2"} <= names, names
    for daemon in summary["daemons"]:
        kept = _clients_kept(tmp_path / "soak.csv", daemon["name"], summary["minutes"] * 60)
        # the message in full (a tuple's repr is cut short): which fds grew, and when
        assert daemon["fds_end"] <= daemon["fds_start"] + FD_SLACK + FDS_PER_CLIENT * kept, \
            "\n".join([json.dumps(daemon), f"clients kept: {kept}",
                       *_last_samples(tmp_path / "soak.csv", daemon["name"], 40)])
    assert Path(summary["picture"]).stat().st_size > 0
    assert (tmp_path / "soak.csv").read_text().startswith("t,daemon,pid,")


def _clients_kept(csv: Path, daemon: str, seconds: float) -> int:
    """Clients the daemon holds in its last sample above its start sample, taken as
    the figures take it (bench/soak_sampling.py): its first balanced sample of the
    end's shape (processors alive, role) in the slope window, else its first one."""
    head, *rows = [line.split(",") for line in csv.read_text().splitlines()]
    col = {name: k for k, name in enumerate(head)}
    mine = [r for r in rows if r[col["daemon"]] == daemon]
    if not mine:
        return 0
    end = mine[-1]
    shape = (end[col["processors"]], end[col["role"]])
    alike = [r for r in mine if r[col["balanced"]] == "True"
             and (r[col["processors"]], r[col["role"]]) == shape] or [end]
    window = slope_window(seconds)
    start = next((r for r in alike if float(r[col["t"]]) >= window), alike[0])
    return max(0, int(end[col["kafka_clients"]]) - int(start[col["kafka_clients"]]))


def _last_samples(csv: Path, daemon: str, count: int = 15) -> list[str]:
    """A daemon's last samples (t, fds, clients, store files, balanced, role): what a
    failed fd check needs to tell a leak from clients still closing."""
    rows = [line.split(",") for line in csv.read_text().splitlines()[1:]]
    return [f"t={r[0]} fds={r[5]} clients={r[7]} store_files={r[8]} balanced={r[9]} "
            f"role={r[11]}" for r in rows if r[1] == daemon][-count:]


class _Message:
    """What `lost_inputs` reads of a consumed record."""

    def __init__(self, topic: str, partition: int, offset: int, key: bytes, value: int,
                 ms: int) -> None:
        self._at = (topic, partition, offset, key, str(value).encode(), ms)

    def topic(self) -> str:
        return self._at[0]

    def partition(self) -> int:
        return self._at[1]

    def offset(self) -> int:
        return self._at[2]

    def key(self) -> bytes:
        return self._at[3]

    def value(self) -> bytes:
        return self._at[4]

    def timestamp(self) -> tuple[int, int]:
        return 1, self._at[5]


def test_a_lost_sum_is_traced_to_its_input_and_the_output_before_it() -> None:
    inputs = [_Message("events", 3, 40 + i, b"k", 1, 1_000 * i) for i in range(4)]
    inputs.append(_Message("events", 7, 9, b"j", 5, 7_000))
    outputs = [_Message("sums", 3, 100, b"k", 1, 0), _Message("sums", 3, 101, b"k", 2, 0),
               _Message("sums", 3, 102, b"k", 4, 0), _Message("sums", 7, 5, b"j", 5, 0)]
    lines = lost_inputs(inputs, outputs)
    assert len(lines) == 1
    assert lines[0].startswith("lost: key b'k' sum 3: input events:3@42 written ")
    assert "the output before it sums:3@101" in lines[0]
    assert lost_inputs(inputs, [*outputs, _Message("sums", 3, 103, b"k", 3, 0)]) == []


def test_clients_kept_are_counted_from_the_start_sample_of_the_end_shape(tmp_path: Path) -> None:
    head = "t,daemon,pid,age_s,rss_mb,fds,threads,kafka_clients,store_files,balanced," \
           "processors,role"
    rows = ["20,p2,1,20,70,80,40,7,10,True,p1+p2,active",     # before the window
            "120,p2,1,120,70,90,45,9,20,True,p1+p2+p3,active",  # another shape
            "130,p2,1,130,70,100,50,9,25,True,p1+p2,active",    # the start
            "180,p2,1,180,70,117,57,10,28,False,p1+p2,active",
            "240,p2,1,240,70,119,58,10,28,True,p1+p2,active"]   # the end
    csv = tmp_path / "soak.csv"
    csv.write_text("\n".join([head, *rows]) + "\n")
    assert _clients_kept(csv, "p2", 240) == 1
    assert _clients_kept(csv, "p1", 240) == 0
