"""Which state keys a split parent drops as its child's (processor/runtime/children.py,
`child_key`): a record key homed on the child, and an entry `<record key>/<more>` only
when its record key is the child's too; the parent's own entries whose whole name
happens to hash to the child stay."""

from __future__ import annotations

from orchestrator.wire.partitioners import home_partition
from processor.runtime.children import child_key

_PARTITIONER = "consistent_random"
_COUNTS = {"events": 8}
_CHILD = [("events", 5)]            # the child of Partition 1 after 4 -> 8


def _home(key: bytes) -> int | None:
    return home_partition(_PARTITIONER, key, 8)


def test_a_record_key_is_the_childs_where_it_is_homed() -> None:
    keys = [b"k%d" % i for i in range(200)]
    assert [k for k in keys if child_key(k, _PARTITIONER, _CHILD, _COUNTS)] == \
        [k for k in keys if _home(k) == 5]


def test_an_entry_is_the_childs_only_with_its_record_key() -> None:
    parents = [k for k in (b"k%d" % i for i in range(200)) if _home(k) == 1]
    children = [k for k in (b"k%d" % i for i in range(200)) if _home(k) == 5]
    # the parent's entries whose whole name hashes to the child: kept
    hashed_away = [e for k in parents for e in (k + b"/%012d" % n for n in range(50))
                   if _home(e) == 5]
    assert hashed_away
    assert not any(child_key(e, _PARTITIONER, _CHILD, _COUNTS) for e in hashed_away)
    # the child's entries: dropped when the whole name hashes to the child too
    own = [k + b"/%d/x" % n for k in children for n in range(20)]
    dropped = [e for e in own if child_key(e, _PARTITIONER, _CHILD, _COUNTS)]
    assert dropped and all(_home(e) == 5 and _home(e.split(b"/")[0]) == 5 for e in dropped)
    # a record key with a "/" homed on the parent, its prefix on the child: kept
    slashed = [k for k in (b"a%d/b" % i for i in range(400))
               if _home(k) == 1 and _home(k.split(b"/")[0]) == 5]
    assert slashed and not any(child_key(k, _PARTITIONER, _CHILD, _COUNTS) for k in slashed)
