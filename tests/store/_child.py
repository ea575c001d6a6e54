"""Child processes for the store tests: run as `python _child.py COMMAND PATH [ARG]`.

hold PATH          open the store, print "ready", keep it open until stdin closes
commit-loop PATH N [nowal]
                   commit batches forever: batch i sets keys k0..k(N-1) to i with
                   offsets {"t:0": i}, then prints i (the parent SIGKILLs it);
                   `nowal`: with RocksDB's write-ahead log off
write-sst PATH N   write N items and offsets {"t:0": N} into an SST file, no store open
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def hold(path: str) -> None:
    from store import TaskStore

    store = TaskStore(path)
    print("ready", flush=True)
    sys.stdin.read()
    store.close()


def commit_loop(path: str, nkeys: int, wal: bool = True) -> None:
    from store import TaskStore

    store = TaskStore(path, wal=wal)
    keys = [f"k{j}" for j in range(nkeys)]
    batch = 0
    while True:
        batch += 1
        for key in keys:
            store.state[key] = batch
        store.commit({"t:0": batch})
        print(batch, flush=True)


def write_sst_file(path: str, count: int) -> None:
    from store.sst import write_sst

    items = [(f"s{j:05d}", {"n": j}) for j in reversed(range(count))]
    print(write_sst(path, items, {"t:0": count}), flush=True)


def main(argv: list[str]) -> None:
    command, path, *rest = argv
    if command == "hold":
        hold(path)
    elif command == "commit-loop":
        commit_loop(path, int(rest[0]), wal=rest[1:] != ["nowal"])
    elif command == "write-sst":
        write_sst_file(path, int(rest[0]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
