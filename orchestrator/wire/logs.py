"""Structured logs for the daemons: one line per event, `ts level logger message`,
or JSON lines with BATON_LOG_FORMAT=json (for log shippers).

Every line passes a mask of the config's secret values last (`secrets`): whatever a
message, a librdkafka line or a traceback quotes, a secret leaves as `[redacted]`.
Uncaught exceptions are logged too rather than printed past the mask (librdkafka's
"Invalid value ... for configuration property ..." quotes the value).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Collection
from types import TracebackType

from orchestrator.wire.secrets import mask

__all__ = ["setup_logging"]


class _Mask:
    """Masks the config's secret values in log text: as given, and as `repr` spells them
    (a settings dict logged with %s shows its values' reprs, backslashes doubled)."""

    def __init__(self, secrets: Collection[str]) -> None:
        spellings = {*secrets, *(repr(value)[1:-1] for value in secrets)}
        self._spellings = sorted(spellings, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        return mask(text, self._spellings)


class _JsonFormatter(logging.Formatter):
    """Masked before encoding: JSON escapes would hide a value from the mask."""

    def __init__(self, masked: _Mask) -> None:
        super().__init__()
        self._mask = masked

    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": self.formatTime(record), "level": record.levelname,
                 "logger": record.name, "message": self._mask(record.getMessage())}
        if record.exc_info:
            entry["exc"] = self._mask(self.formatException(record.exc_info))
        return json.dumps(entry)


class _TextFormatter(logging.Formatter):
    """The whole line masked: message, arguments and traceback."""

    def __init__(self, fmt: str, masked: _Mask) -> None:
        super().__init__(fmt)
        self._mask = masked

    def format(self, record: logging.LogRecord) -> str:
        return self._mask(super().format(record))


def setup_logging(component: str, level: str | None = None,
                  secrets: Collection[str] = ()) -> None:
    """Log to stderr; level from BATON_LOG_LEVEL (default INFO); `secrets` (the
    config's `secret_values()`) never leave in a line."""
    handler = logging.StreamHandler(sys.stderr)
    masked = _Mask(secrets)
    handler.setFormatter(
        _JsonFormatter(masked) if os.environ.get("BATON_LOG_FORMAT") == "json" else
        _TextFormatter(f"%(asctime)s %(levelname)s {component} %(name)s: %(message)s", masked))
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level or os.environ.get("BATON_LOG_LEVEL", "INFO"))
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _log_uncaught(kind: type[BaseException], value: BaseException,
                  traceback: TracebackType | None) -> None:
    logging.getLogger("baton").critical("uncaught exception", exc_info=(kind, value, traceback))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or args.exc_value is None:
        return
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("baton").critical("uncaught exception in thread %s", name,
                                        exc_info=(args.exc_type, args.exc_value,
                                                  args.exc_traceback))
