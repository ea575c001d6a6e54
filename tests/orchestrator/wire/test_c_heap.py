"""The C heap's arena limit and trim, in a fresh interpreter each (the limit holds only
if set before a thread's first allocation)."""

from __future__ import annotations

import os
import subprocess
import sys

_COUNT_ARENAS = """
import sys, threading
from orchestrator.wire.c_heap import limit_arenas
print(limit_arenas())
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


def _arenas(env: dict[str, str]) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", "import os\n" + _COUNT_ARENAS], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    return out[0], int(out[1])


def test_a_processor_keeps_to_its_arenas_and_an_operators_limit_stands() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    set_, limited = _arenas(env)
    assert set_ == "True" and limited <= 2
    set_, free = _arenas({**env, "MALLOC_ARENA_MAX": "6"})
    assert set_ == "False" and 2 < free <= 6            # glibc's own reading of it
