"""The exactly-once oracles of the example jobs: per key, the output sequence must
equal the running sums of that key's inputs in order (no gap, no duplicate); for
`IdentifiedSum`, with one id per key throughout (its state moved intact)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["IdentifiedResult", "OracleResult", "check_identified_sums", "check_running_sums"]


@dataclass(frozen=True)
class OracleResult:
    records_in: int
    records_out: int
    lost: int
    duplicated: int
    wrong: int
    keys: int
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.wrong == 0 \
            and self.records_in == self.records_out


def check_running_sums(inputs: Iterable[tuple[bytes, bytes]],
                       outputs: Iterable[tuple[bytes, bytes]]) -> OracleResult:
    """Compare per key; `inputs` in partition-offset order, `outputs` likewise.

    Counts: `lost` expected values never output, `duplicated` outputs beyond the first
    of a value, `wrong` values that no single processor would have produced or that
    came out of order.
    """
    expected: dict[bytes, list[int]] = defaultdict(list)
    records_in = 0
    for key, value in inputs:
        sums = expected[key]
        sums.append((sums[-1] if sums else 0) + int(value))
        records_in += 1
    actual: dict[bytes, list[int]] = defaultdict(list)
    records_out = 0
    for key, value in outputs:
        actual[key].append(int(value))
        records_out += 1
    lost = duplicated = wrong = 0
    examples: list[str] = []
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key, []), actual.get(key, [])
        if want == got:
            continue
        want_set, got_set = set(want), set(got)
        lost += len(want_set - got_set)
        duplicated += len(got) - len(got_set)
        deduped = list(dict.fromkeys(got))
        in_order = [v for v in want if v in got_set]
        wrong += len(got_set - want_set) + (0 if deduped == in_order else 1)
        if len(examples) < 5:
            examples.append(_difference(key, want, got))
    return OracleResult(records_in, records_out, lost, duplicated, wrong,
                        len(expected), examples)


def _difference(key: bytes, want: list[int], got: list[int]) -> str:
    """Where `key`'s outputs first part from its running sums, with a few around it: a
    loss after hours of traffic shows as itself, not as the key's first sums."""
    first = next((i for i, (w, g) in enumerate(zip(want, got, strict=False)) if w != g),
                 min(len(want), len(got)))
    lo = max(0, first - 2)
    return (f"key {key!r}: from its output #{first} (of {len(want)} expected, {len(got)} "
            f"out): expected {want[lo:first + 3]}, got {got[lo:first + 3]}")


@dataclass(frozen=True)
class IdentifiedResult:
    """The running-sum verdict on the sums, and the keys whose id changed."""

    sums: OracleResult
    keys_with_several_ids: int
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.sums.ok and self.keys_with_several_ids == 0


def check_identified_sums(inputs: Iterable[tuple[bytes, bytes]],
                          outputs: Iterable[tuple[bytes, bytes]]) -> IdentifiedResult:
    """`IdentifiedSum`'s oracle: outputs "<id>:<sum>" are running sums (as
    `check_running_sums` counts them) and each key keeps one id throughout.

    A key with two ids had its state rebuilt by replaying its input (or lost it): the
    new owner drew a new id where the old one had drawn its own.
    """
    sums: list[tuple[bytes, bytes]] = []
    ids: dict[bytes, list[str]] = defaultdict(list)
    for key, value in outputs:
        ident, _, total = value.decode().rpartition(":")
        sums.append((key, total.encode()))
        if ident not in ids[key]:
            ids[key].append(ident)
    several = {k: v for k, v in ids.items() if len(v) > 1}
    examples = [f"key {k!r}: ids {v[:4]}" for k, v in sorted(several.items())[:5]]
    return IdentifiedResult(check_running_sums(inputs, sums), len(several), examples)
