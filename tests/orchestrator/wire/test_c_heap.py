"""The C heap's arena limit, mmap threshold and trim, in a fresh interpreter each (the
settings hold only if made before a thread's first allocation)."""

from __future__ import annotations

import os
import subprocess
import sys

_COUNT_ARENAS = """
import sys, threading
from orchestrator.wire.c_heap import shape_heap
print(shape_heap()["arenas"])
together = threading.Barrier(12)
def churn():
    blocks = [bytearray(2000) for _ in range(2000)]     # past pymalloc: glibc's malloc
    together.wait()             # all alive at once: a finished thread's arena is reused
    del blocks
threads = [threading.Thread(target=churn) for _ in range(12)]
for t in threads: t.start()
for t in threads: t.join()
# glibc's malloc_info names each arena once: <heap nr="N">
import ctypes, tempfile
libc = ctypes.CDLL(None)
libc.fdopen.restype = ctypes.c_void_p
libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
with tempfile.TemporaryFile("w+") as f:
    stream = libc.fdopen(os.dup(f.fileno()), b"w")
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    f.seek(0)
    print(f.read().count("<heap nr="))
"""

# a 4 MiB block freed (as a flushed memtable's or a large fetch's): is a 256 KiB block
# asked for after it still mapped on its own (mallinfo2's count of mapped blocks)?
_MAPPED_AFTER_A_LARGE_FREE = """
import ctypes, sys
from orchestrator.wire.c_heap import shape_heap
print(shape_heap()["mmap_threshold"] if sys.argv[1] == "shape" else "-")
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(4 << 20))
before = libc.mallinfo2().hblks
block = libc.malloc(256 << 10)
print(libc.mallinfo2().hblks > before)
libc.free(block)
"""


def _run(program: str, env: dict[str, str], *args: str) -> list[str]:
    return subprocess.run([sys.executable, "-c", "import os\n" + program, *args], env=env,
                          capture_output=True, text=True, check=True).stdout.split()


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")}


def test_a_processor_keeps_to_its_arenas_and_an_operators_limit_stands() -> None:
    env = _clean_env()
    set_, limited = _run(_COUNT_ARENAS, env)
    assert set_ == "True" and int(limited) <= 2
    set_, free = _run(_COUNT_ARENAS, {**env, "MALLOC_ARENA_MAX": "6"})
    assert set_ == "False" and 2 < int(free) <= 6       # glibc's own reading of it


def test_large_blocks_stay_mapped_after_a_larger_one_is_freed() -> None:
    env = _clean_env()
    assert _run(_MAPPED_AFTER_A_LARGE_FREE, env, "shape") == ["True", "True"]
    # glibc left alone: the 4 MiB block's free raised its threshold, and the 256 KiB
    # block is carved out of an arena
    assert _run(_MAPPED_AFTER_A_LARGE_FREE, env, "leave") == ["-", "False"]
    # an operator's tunable stands
    tuned = {**env, "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=1048576"}
    assert _run(_MAPPED_AFTER_A_LARGE_FREE, tuned, "shape") == ["False", "False"]
