"""Where a handoff's pause went, read from the daemons' logs
(orchestrator/devkit/handoff_phases.py): each phase from the lines that stamp it, a
handoff whose lines are missing keeps the phases it has."""

from __future__ import annotations

from pathlib import Path

from orchestrator.devkit.handoff_phases import phase_summary, read_phases


def _line(at: str, who: str, text: str) -> str:
    logger = "baton.coordinator" if who == "coordinator" else "baton.processor.runtime"
    return f"2026-11-29 07:41:{at} INFO {who} {logger}: {text}\n"


P2 = "task 'Partition 2' handoff p1 -> p2"
COORDINATOR = "".join([
    _line("17,700", "coordinator", "task 'Partition 2': handoff p1 -> p2 planned (lag unknown)"),
    _line("17,772", "coordinator", f"{P2}: planned -> catching_up"),
    _line("17,833", "coordinator", f"{P2}: catching_up -> releasing"),
    _line("17,936", "coordinator", f"{P2}: releasing -> activating"),
    _line("18,074", "coordinator", f"{P2}: activating -> done"),
    _line("20,000", "coordinator", "task 'Partition 3' handoff p2 -> p1: catching_up -> releasing"),
])
OLD = _line("17,925", "processor[p1]",
            "task 'Partition 2': released at {'events:2': 3221} (release 33 ms)")
NEW = _line("18,034", "processor[p2]", "task 'Partition 2': active from {'events:2': 3221}") \
    + _line("18,071", "processor[p2]",
            "task 'Partition 2': first output committed 81 ms after activation began (fence "
            "24 ms, t1 20 ms, replay 0 ms, first_read 11 ms, first_commit 26 ms)")


def _logs(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    paths = {}
    for name, text in (("coordinator", COORDINATOR), ("p1", OLD), ("p2", NEW)):
        paths[name] = tmp_path / f"{name}.log"
        paths[name].write_text(text)
    return paths.pop("coordinator"), paths


def test_each_phase_comes_from_the_lines_that_stamp_it(tmp_path: Path) -> None:
    coordinator, processors = _logs(tmp_path)
    [handoff] = read_phases(coordinator, processors)
    assert (handoff.task, handoff.source, handoff.target) == ("Partition 2", "p1", "p2")
    # decided 17.833, acknowledged 17.936 (103 ms) of which the old owner's 33 ms
    assert handoff.ms["release_told"] == 70.0
    assert handoff.ms["release"] == 33.0
    # the new owner began at 18.071 - 0.081 = 17.990: 54 ms after the acknowledgement
    assert handoff.ms["activate_told"] == 54.0
    assert {k: handoff.ms[k] for k in ("fence", "t1", "replay", "first_read", "first_commit")} \
        == {"fence": 24.0, "t1": 20.0, "replay": 0.0, "first_read": 11.0, "first_commit": 26.0}


def test_a_handoff_not_released_yet_is_left_out_and_a_summary_counts_what_it_has(
        tmp_path: Path) -> None:
    coordinator, processors = _logs(tmp_path)
    processors["p2"].write_text("")             # the new owner's log lost
    handoffs = read_phases(coordinator, processors)
    assert [h.task for h in handoffs] == ["Partition 2"]
    summary = phase_summary(handoffs)
    assert set(summary) == {"release_told", "release"}
    assert summary["release"] == {"p50": 33.0, "p99": 33.0, "n": 1}
