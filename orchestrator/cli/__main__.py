"""`python -m orchestrator.cli`: the `baton` command."""

from orchestrator.cli.main import main

main()
