"""librdkafka's own log lines, through Python logging.

Without a `logger` in its settings, every librdkafka client prints its log lines
(`%3|1712345678.123|FAIL|rdkafka#producer-3| ...`) straight to stderr, past the
daemons' log format and `BATON_LOG_FORMAT=json`. `client_logging(name)` gives the
settings to merge into a client's config so those lines become records of the
Python logger `baton.kafka.<name>` (level mapped from syslog: 3 is ERROR, 4 WARNING,
6 INFO, 7 DEBUG). librdkafka hands them over when the client is polled (`poll`,
`consume`, `flush`, or any blocking call that serves the queue).

A broker that is down makes every client repeat the same line every few seconds
(connect refused, all brokers down). `RepeatFilter`, attached to every such logger,
lets a line through at most once per `interval_s` and counts the ones it held back;
the next line that passes says how many there were. Lines are "the same" when they
differ only in what librdkafka varies between repeats: the client instance
(`rdkafka#producer-3`), durations (`after 12ms`) and its own suppression counts.

Keep these settings out of anything pickled or shipped to Spark executors: they
hold a live logger object (the Spark paths read `Config.kafka_settings()`, which
never includes it).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_INTERVAL_S", "RepeatFilter", "client_logger", "client_logging"]

# A broker restart takes seconds to minutes; one line per broker and client every
# 30 s says "still down" without drowning everything else.
DEFAULT_INTERVAL_S = 30.0

# Distinct lines remembered per logger; past that the oldest are forgotten (a
# forgotten line simply passes again).
_MAX_KEYS = 512

_VOLATILE = (
    (re.compile(r"rdkafka#[a-z]+-\d+"), "rdkafka#client"),
    (re.compile(r"\(?\b\d+ identical error\(s\) suppressed\)?"), ""),
    (re.compile(r"\b\d+(?:\.\d+)?\s*ms\b"), "Nms"),
    (re.compile(r"\s+"), " "),
)


def _key(record: logging.LogRecord) -> str:
    text = record.getMessage()
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return f"{record.levelno}:{text.strip()}"


class RepeatFilter(logging.Filter):
    """Let the same line through at most once per `interval_s`; count the rest.

    The first line after a quiet interval that was preceded by suppressed repeats gets
    `(N identical lines suppressed in the last Ss)` appended.

    Args:
        interval_s: the minimum time between two identical lines.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        # key -> (when it last passed, repeats suppressed since)
        self._seen: dict[str, tuple[float, int]] = {}
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        key = _key(record)
        now = self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < self.interval_s:
                self._seen[key] = (last[0], last[1] + 1)
                self.suppressed += 1
                return False
            self._seen.pop(key, None)
            self._seen[key] = (now, 0)
            if len(self._seen) > _MAX_KEYS:
                del self._seen[next(iter(self._seen))]
        if last is not None and last[1]:
            record.msg = (f"{record.getMessage()} ({last[1]} identical lines suppressed "
                          f"in the last {now - last[0]:.0f}s)")
            record.args = None
        return True


def client_logger(name: str, interval_s: float = DEFAULT_INTERVAL_S) -> logging.Logger:
    """The logger `baton.kafka.<name>`, with one `RepeatFilter` attached."""
    logger = logging.getLogger(f"baton.kafka.{name}")
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(RepeatFilter(interval_s))
    return logger


def client_logging(name: str, interval_s: float = DEFAULT_INTERVAL_S) -> dict[str, Any]:
    """Settings to merge into a librdkafka client's config: its log lines go to the
    Python logger `baton.kafka.<name>`, rate-limited (see the module docstring)."""
    return {"logger": client_logger(name, interval_s)}
