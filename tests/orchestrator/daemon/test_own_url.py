"""The URL a coordinator advertises as the leader's: one of `coordinator.url`, which
clients follow (they follow no URL outside their list)."""

from __future__ import annotations

import socket

import pytest

from orchestrator.daemon.main import own_url


def test_the_listed_url_with_the_listening_port() -> None:
    urls = ["https://10.0.0.2:8700", "https://10.0.0.3:8701"]
    assert own_url("0.0.0.0:8701", True, urls) == "https://10.0.0.3:8701"


def test_several_on_one_port_the_one_naming_this_host(monkeypatch: pytest.MonkeyPatch) -> None:
    urls = ["http://baton-coordinator-0.baton-coordinator:8700",
            "http://baton-coordinator-1.baton-coordinator:8700"]
    monkeypatch.setattr(socket, "gethostname", lambda: "baton-coordinator-1")
    assert own_url("10.1.2.3:8700", False, urls) == urls[1]
    monkeypatch.setattr(socket, "gethostname", lambda: "elsewhere")
    assert own_url("10.1.2.3:8700", False, urls) == "http://10.1.2.3:8700"


def test_a_wildcard_listen_is_advertised_by_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "coord-a")
    assert own_url("0.0.0.0:8700", False, []) == "http://coord-a:8700"
