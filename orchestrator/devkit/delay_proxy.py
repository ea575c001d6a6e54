"""A TCP proxy that adds latency, for tests across hosts (the kernel here has no netem).

    python -m orchestrator.devkit.delay_proxy --listen 198.18.52.10:9092 \\
        --to 127.0.0.1:19092 --delay-file /tmp/delay_ms

Theory of operation: each accepted connection is paired with one to `--to`; every
chunk read on either side is forwarded `delay` milliseconds after it was read, in
order, so each direction gains that one-way delay and each round trip twice it; the
bandwidth is not limited. The delay is read from `--delay-file` (a number of
milliseconds; missing or empty: 0) when the file changes, so a test can add latency
to connections already open. A half-close is passed on after the same delay.

Why a proxy of Baton's own rather than Toxiproxy: this is the one behaviour needed
(fixed latency, changed at run time), it starts in a network namespace with the
project's Python and nothing to fetch or build, and it is one screen long.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from pathlib import Path

__all__ = ["DelayFile", "main"]

_CHUNK = 65536
# the reading half of every pipe (held: see `_serve`)
_READING: set[asyncio.Task[None]] = set()


class DelayFile:
    """The delay in seconds, re-read when the file's modification time changes."""

    def __init__(self, path: Path | None) -> None:
        self._path, self._stamp, self._seconds = path, -1, 0.0

    def seconds(self) -> float:
        if self._path is None:
            return 0.0
        try:
            stamp = os.stat(self._path).st_mtime_ns
        except FileNotFoundError:
            return 0.0
        if stamp != self._stamp:
            self._stamp = stamp
            text = self._path.read_text().strip()
            self._seconds = float(text) / 1000 if text else 0.0
        return self._seconds


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                delay: DelayFile) -> None:
    """Forward `reader` to `writer`, each chunk `delay` after it arrived."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        while True:
            try:
                data = await reader.read(_CHUNK)
            except OSError:
                data = b""
            queue.put_nowait((loop.time() + delay.seconds(), data))
            if not data:
                return

    reading = asyncio.create_task(read())
    _READING.add(reading)
    reading.add_done_callback(_READING.discard)
    try:
        while True:
            due, data = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
    except OSError:
        return
    finally:
        reading.cancel()


async def _serve(listen: tuple[str, int], to: tuple[str, int], delay: DelayFile) -> None:
    # the connections' tasks, held here: asyncio keeps only weak references to tasks,
    # and an idle connection's would otherwise be collected with the connection open
    live: set[asyncio.Task[None]] = set()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*to)
        except OSError:
            writer.close()
            return
        pipes = [asyncio.create_task(_pipe(reader, up_writer, delay)),
                 asyncio.create_task(_pipe(up_reader, writer, delay))]
        live.update(pipes)
        try:
            await asyncio.wait(pipes, return_when=asyncio.ALL_COMPLETED)
        finally:
            live.difference_update(pipes)
            for w in (writer, up_writer):
                w.close()

    server = await asyncio.start_server(accept, *listen, reuse_address=True)
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A TCP proxy that adds latency.")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    parser.add_argument("--to", required=True, metavar="HOST:PORT")
    parser.add_argument("--delay-file", type=Path, default=None, metavar="FILE",
                        help="milliseconds of one-way delay, re-read when it changes")
    args = parser.parse_args(argv)
    asyncio.run(_serve(_address(args.listen), _address(args.to), DelayFile(args.delay_file)))


if __name__ == "__main__":
    main()
