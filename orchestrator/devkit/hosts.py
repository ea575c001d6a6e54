"""Several hosts on one machine, for tests: each host a network namespace with its own
address on a bridge, and the network faults between them.

Theory of operation: `Network` creates a Linux bridge in the caller's namespace (the
operator's host: the tests, their feeder and oracle, Prometheus) with the subnet's
first address, and one namespace per `Host`, joined to the bridge by a veth pair whose
inner end is the host's `eth0`. A daemon runs on a host as `ip netns exec NS argv`
(`Host.command`), so it binds and connects from the host's address alone; loopback is
up in each namespace, for what a host keeps to itself (the broker's controller).

Faults are routes, which the kernel has without any extra module:

- `cut(a, b)`: a blackhole route to the other's address on both hosts: nothing flows
  either way; an open TCP connection stalls, a new one fails at once.
- `one_way(a, b)`: the route on `b` only: `a`'s packets still reach `b`, nothing
  returns (a TCP peer sees its connection hang, as behind a firewall dropping replies).
- `isolate(a)`: the host's `eth0` goes down: it reaches nothing and nothing reaches it.

`heal()` undoes every fault. `close()` (and leaving the `with` block) deletes the
namespaces and the bridge even after a failure; names are unique per `Network`, so
runs side by side never meet. A run that was killed before its `close()` leaves its
bridge and namespaces behind, holding the subnet; each bridge carries its creator's pid
(as its alias), so the next `Network` removes those whose creator is gone and refuses,
naming them, those whose creator still runs. Needs root (CAP_NET_ADMIN).
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from orchestrator.devkit.kafka import KafkaBroker

__all__ = ["Host", "HostKafkaBroker", "Network", "NetworkError"]

# one name fits Linux's 15-character interface names: "bb" + 8 hex + a host index
_UID_CHARS = 8
# a broker behind the delay proxy listens on its host's loopback this far above its port
_BEHIND_PROXY = 10000


class NetworkError(RuntimeError):
    """An `ip` command failed; the message names it and its error."""


def _ip(*args: str, netns: str | None = None) -> None:
    argv = (["ip", "netns", "exec", netns] if netns else []) + ["ip", *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


@dataclass
class Host:
    """One host: its name, address and namespace, and the faults set on it."""

    name: str
    address: str
    netns: str
    blackholed: set[str] = field(default_factory=set)
    isolated: bool = False

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run on this host."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def drop_to(self, address: str) -> None:
        """Route `address` into a blackhole on this host: what it sends there is lost."""
        if address not in self.blackholed:
            _ip("route", "add", "blackhole", f"{address}/32", netns=self.netns)
            self.blackholed.add(address)

    def heal(self) -> None:
        for address in sorted(self.blackholed):
            _ip("route", "del", "blackhole", f"{address}/32", netns=self.netns)
        self.blackholed.clear()
        if self.isolated:
            _ip("link", "set", "eth0", "up", netns=self.netns)
            self.isolated = False


class Network:
    """A bridge and the hosts on it; see the module docstring.

    Args:
        subnet: an IPv4 /24 of the hosts (the bridge takes its first address).
    """

    def __init__(self, subnet: str) -> None:
        self.subnet = ipaddress.ip_network(subnet)
        if self.subnet.prefixlen != 24:
            raise ValueError(f"subnet {subnet}: a /24 is expected")
        self.uid = uuid.uuid4().hex[:_UID_CHARS]
        self.bridge = f"bb{self.uid}"
        self.gateway = str(self.subnet.network_address + 1)
        self.hosts: dict[str, Host] = {}
        self._veths: list[str] = []
        _sweep(self.gateway)
        _ip("link", "add", self.bridge, "type", "bridge")
        try:
            _ip("link", "set", self.bridge, "alias", f"{_ALIAS}{os.getpid()}")
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except NetworkError:
            self.close()
            raise

    def add(self, name: str, address: str) -> Host:
        """A new host `name` at `address` (in the subnet), joined to the bridge."""
        if ipaddress.ip_address(address) not in self.subnet:
            raise ValueError(f"host {name}: {address} is not in {self.subnet}")
        index = len(self.hosts)
        host = Host(name, address, f"baton-{self.uid}-{name}")
        outer, inner = f"bv{self.uid}{index}", f"bi{self.uid}{index}"
        _ip("netns", "add", host.netns)
        self.hosts[name] = host
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        self._veths.append(outer)
        _ip("link", "set", inner, "netns", host.netns)
        _ip("link", "set", inner, "name", "eth0", netns=host.netns)
        _ip("addr", "add", f"{address}/24", "dev", "eth0", netns=host.netns)
        _ip("link", "set", "eth0", "up", netns=host.netns)
        _ip("link", "set", "lo", "up", netns=host.netns)
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        return host

    def cut(self, a: Host, b: Host) -> None:
        """Nothing flows between `a` and `b`, either way."""
        a.drop_to(b.address)
        b.drop_to(a.address)

    def one_way(self, a: Host, b: Host) -> None:
        """`a`'s packets reach `b`; nothing `b` sends reaches `a`."""
        b.drop_to(a.address)

    def isolate(self, host: Host) -> None:
        """`host` reaches nothing, and nothing reaches it."""
        _ip("link", "set", "eth0", "down", netns=host.netns)
        host.isolated = True

    def heal(self) -> None:
        """Undo every fault."""
        for host in self.hosts.values():
            host.heal()

    def close(self) -> None:
        """Delete the veths, the namespaces and the bridge (a namespace's own deletion
        takes its veth along only later, in the background)."""
        for veth in self._veths:
            subprocess.run(["ip", "link", "del", veth], capture_output=True, check=False)
        self._veths.clear()
        for host in self.hosts.values():
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True,
                           check=False)
        self.hosts.clear()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


_ALIAS = "baton-devkit-pid-"


def _sweep(gateway: str) -> None:
    """Remove the bridges (and their namespaces) of devkit runs whose process is gone;
    raise if a live one's bridge holds `gateway`."""
    shown = subprocess.run(["ip", "-j", "-d", "addr", "show", "type", "bridge"],
                           capture_output=True, text=True, check=False)
    try:
        links = json.loads(shown.stdout or "[]")
    except ValueError:
        return
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                           check=False).stdout.split()
    for link in links:
        name, alias = str(link.get("ifname", "")), str(link.get("ifalias", ""))
        if not (name.startswith("bb") and alias.startswith(_ALIAS)):
            continue
        pid = int(alias[len(_ALIAS):] or 0)
        if pid and Path(f"/proc/{pid}").exists():
            if any(a.get("local") == gateway for a in link.get("addr_info", [])):
                raise NetworkError(f"{gateway} is on bridge {name} of process {pid}, "
                                   "which still runs: another several-host network")
            continue
        uid = name[2:]
        for ns in netns:
            if ns.startswith(f"baton-{uid}-"):
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


class HostKafkaBroker(KafkaBroker):
    """An Apache Kafka broker on `host`, reached at the host's address and `port`: its JVM
    in the host's namespace, its controller on the host's loopback.

    With `delay_file`, clients reach it through orchestrator/devkit/delay_proxy.py on
    that address (the broker itself listens on the host's loopback, `port` + 10000, and
    advertises the proxy), which delays every byte either way by the milliseconds
    written in the file: latency between every host and the broker.
    """

    def __init__(self, host: Host, data_dir: Path, port: int, logs: Path | None = None,
                 nice: int = 0, delay_file: Path | None = None) -> None:
        super().__init__(data_dir, port=port, logs=logs, nice=nice)
        self.host, self.delay_file = host, delay_file
        self._proxy: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host.address}:{self.port}"

    def listener_properties(self) -> dict[str, str]:
        inside = (f"127.0.0.1:{self.port + _BEHIND_PROXY}" if self.delay_file
                  else f"{self.host.address}:{self.port}")
        return {"listeners": (f"PLAINTEXT://{inside},"
                              f"CONTROLLER://127.0.0.1:{self.controller_port}"),
                "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"}

    def _java(self, main: str, *args: str, options: Sequence[str] = ()) -> list[str]:
        return self.host.command(super()._java(main, *args, options=options))

    def start(self) -> str:
        if self.delay_file is not None and self._proxy is None:
            with (self.data_dir / "proxy.log").open("ab") as out:
                self._proxy = subprocess.Popen(self.host.command([
                    sys.executable, "-m", "orchestrator.devkit.delay_proxy",
                    "--listen", self.bootstrap,
                    "--to", f"127.0.0.1:{self.port + _BEHIND_PROXY}",
                    "--delay-file", str(self.delay_file)]),
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True)
        return super().start()

    def close(self) -> None:
        super().close()
        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            proxy.kill()
            proxy.wait()
