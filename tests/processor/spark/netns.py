"""A network namespace joined to the host by a veth pair, for tests that need a peer
on a non-loopback address while all traffic stays on this machine (needs root and
`ip`). The host side gets `host_ip`, the namespace `ns_ip`, on a /30 no interface of
the host uses yet. Everything is removed on exit, by name."""

from __future__ import annotations

import ipaddress
import random
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["Namespace", "veth_namespace"]


@dataclass(frozen=True)
class Namespace:
    name: str
    host_ip: str
    ns_ip: str

    def command(self, *args: str) -> list[str]:
        """`args` run inside the namespace (`ip netns exec` keeps the PID: it execs)."""
        return ["ip", "netns", "exec", self.name, *args]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _free_subnet() -> ipaddress.IPv4Network:
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True,
                          check=True, timeout=30).stdout
    while True:
        net = ipaddress.IPv4Network(f"10.{random.randint(200, 250)}."
                                    f"{random.randint(0, 255)}.{4 * random.randint(0, 63)}/30")
        if f" {net[1]}/" not in used and f" {net[2]}/" not in used:
            return net


@contextmanager
def veth_namespace() -> Iterator[Namespace]:
    tag = uuid.uuid4().hex[:8]
    name, host_if, ns_if = f"baton-{tag}", f"bh{tag}", f"bn{tag}"
    net = _free_subnet()
    ns = Namespace(name, str(net[1]), str(net[2]))
    _ip("netns", "add", name)
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", name)
        _ip("addr", "add", f"{ns.host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("netns", "exec", name, "ip", "addr", "add", f"{ns.ns_ip}/30", "dev", ns_if)
        _ip("netns", "exec", name, "ip", "link", "set", ns_if, "up")
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield ns
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
