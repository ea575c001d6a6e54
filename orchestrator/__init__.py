"""orchestrator package."""
