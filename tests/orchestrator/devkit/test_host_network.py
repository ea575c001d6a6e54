"""The several-host network's own housekeeping (orchestrator/devkit/hosts.py): a run
killed before its `close()` must not hold the subnet for the next one, and two live
networks on one subnet are refused. Real bridges and namespaces (needs root)."""

from __future__ import annotations

import subprocess

import pytest

from orchestrator.devkit.hosts import Network, NetworkError

# a /24 of the benchmarking range no other test uses
SUBNET, GATEWAY = "198.18.77.0/24", "198.18.77.1"


def _bridges() -> str:
    return subprocess.run(["ip", "-br", "link", "show", "type", "bridge"],
                          capture_output=True, text=True, check=True).stdout


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                          check=True).stdout


def _leftover(uid: str, pid: int) -> None:
    """What a run killed mid-way leaves: its bridge with the gateway, and a namespace."""
    for argv in (["link", "add", f"bb{uid}", "type", "bridge"],
                 ["link", "set", f"bb{uid}", "alias", f"baton-devkit-pid-{pid}"],
                 ["addr", "add", f"{GATEWAY}/24", "dev", f"bb{uid}"],
                 ["link", "set", f"bb{uid}", "up"], ["netns", "add", f"baton-{uid}-host"]):
        subprocess.run(["ip", *argv], check=True, capture_output=True)


def test_a_dead_runs_bridge_and_namespaces_are_removed() -> None:
    with subprocess.Popen(["true"]) as gone:
        gone.wait()
    _leftover("0dead0001", gone.pid)
    try:
        with Network(SUBNET) as net:
            host = net.add("a", "198.18.77.5")
            assert "bb0dead0001" not in _bridges()
            assert "baton-0dead0001-host" not in _namespaces()
            assert host.netns in _namespaces()
        assert net.bridge not in _bridges() and host.netns not in _namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", "baton-0dead0001-host"], capture_output=True)
        subprocess.run(["ip", "link", "del", "bb0dead0001"], capture_output=True)


def test_a_live_networks_subnet_is_refused() -> None:
    with Network(SUBNET) as net:
        with pytest.raises(NetworkError, match=f"{GATEWAY} is on bridge {net.bridge}"):
            Network(SUBNET)
    assert net.bridge not in _bridges()
