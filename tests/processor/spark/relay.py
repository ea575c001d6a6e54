"""A TCP relay for tests: `python relay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT`.

Prints "ready" once listening, then forwards every connection both ways until killed.
The Spark cluster test runs one in the host's namespace and one in the cluster's
network namespace, so executors there reach the test broker at the address it
advertises (127.0.0.1:port) although it listens on the host's loopback only.
"""

from __future__ import annotations

import socket
import sys
import threading


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve(client: socket.socket, target: tuple[str, int]) -> None:
    try:
        upstream = socket.create_connection(target, timeout=10)
    except OSError:
        client.close()
        return
    upstream.settimeout(None)
    threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
    _pump(upstream, client)


def main(listen_host: str, listen_port: str, target_host: str, target_port: str) -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((listen_host, int(listen_port)))
    server.listen(64)
    print("ready", flush=True)
    while True:
        client, _ = server.accept()
        threading.Thread(target=_serve, args=(client, (target_host, int(target_port))),
                         daemon=True).start()


if __name__ == "__main__":
    main(*sys.argv[1:5])
