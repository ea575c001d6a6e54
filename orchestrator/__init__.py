"""orchestrator package."""

__all__ = ["cli", "core", "daemon", "devkit", "kafka", "wire"]
