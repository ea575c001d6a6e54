"""The contract both daemons share.

Protocol, config (its `[job]` section in job_config, its validation, its values from
`BATON_<SECTION>__<KEY>` variables in environment, its reference docs/configuration.md,
and writing one as TOML), token, `[kafka]` secrets, TLS, clock, binding a port that may
be in use for a moment, partition names, partitioners, lineage (S2), expansion barriers,
the catch-up rule, the coordinator client, HTTP helpers, the health endpoints' answers,
the status document, the garbage collector's schedule and the C heap's arenas and trim,
logging setup. (Job
loading is `processor.job.load_job`: it checks for `processor.Job`, which the
orchestrator must not import below its CLI.)
"""

__all__ = [
    "barrier", "binding", "c_heap", "catchup", "changelog", "client", "clock", "collector",
    "config", "config_doc", "environment", "health",
    "http", "job_config", "lineage", "logs", "partitioners", "partitions", "protocol",
    "secrets", "status", "store_config", "tls", "token", "toml_dump",
    "validation",
]
