"""The task driver's reading of a heartbeat reply (processor/runtime/driver.py); what
it carries out is walked against real brokers in test_runtime.py and the end-to-end
files."""

from __future__ import annotations

from orchestrator.wire.protocol import RoleListing
from processor.runtime.driver import replica_roles


def test_replica_roles_list_warmups_and_standbys() -> None:
    assert replica_roles(RoleListing(warmup=["t0"], standby=["t1"])) == {
        "t0": "warmup", "t1": "standby"}
    assert replica_roles(RoleListing(active=["t2"])) == {}
