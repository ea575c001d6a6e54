"""Structured logs for the daemons: one line per event, `ts level logger message`,
or JSON lines with BATON_LOG_FORMAT=json (for log shippers)."""

from __future__ import annotations

import json
import logging
import os
import sys

__all__ = ["setup_logging"]


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": self.formatTime(record), "level": record.levelname,
                 "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(component: str, level: str | None = None) -> None:
    """Log to stderr; level from BATON_LOG_LEVEL (default INFO)."""
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("BATON_LOG_FORMAT") == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(
            f"%(asctime)s %(levelname)s {component} %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level or os.environ.get("BATON_LOG_LEVEL", "INFO"))
    logging.getLogger("httpx").setLevel(logging.WARNING)
