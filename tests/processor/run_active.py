"""A processor stand-in for crash tests: runs every task of a job active, forever.

Usage: python run_active.py CONFIG.toml NAME  (state under the config's state_dir)
"""

from __future__ import annotations

import sys

from orchestrator.wire.config import load_config
from orchestrator.wire.protocol import HeartbeatReply, RoleListing
from processor.runtime import TaskRuntime


def main() -> None:
    config = load_config(sys.argv[1])
    runtime = TaskRuntime(config, sys.argv[2])
    topic = config.job.inputs[0]
    partitions = int(sys.argv[3])
    model = {f"Partition {p}": [f"{topic}:{p}"] for p in range(partitions)}
    runtime.apply(HeartbeatReply(alive=True, tasks=model,
                                 assignment=RoleListing(active=list(model))))
    print("ready", flush=True)
    while True:
        runtime.poll(0.05)


if __name__ == "__main__":
    main()
