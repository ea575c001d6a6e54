"""The contract both daemons share.

Protocol, config, token, `[kafka]` secrets, clock, partition names, partitioners,
lineage (S2), expansion barriers, the catch-up rule, the coordinator client, logging
setup. (Job loading is
`processor.job.load_job`: it checks for `processor.Job`, which the orchestrator must not
import below its CLI.)
"""

__all__ = [
    "barrier", "catchup", "changelog", "client", "clock", "config", "lineage", "logs",
    "partitioners", "partitions", "protocol", "secrets", "status", "token",
]
