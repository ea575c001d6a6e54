"""Who may call what: the operator token, the processor token, their rotation, and
(under mutual TLS) the processor id a client certificate is bound to.

Two kinds of callers reach the control API. Operators (the CLI, scripts) read status
and change the job (plan, drain, expand, split); processors register and heartbeat.
With `coordinator.processor_token_file` set, each kind has its own token and neither
is accepted on the other's endpoints (403): a token copied off a processor host cannot
drain the job, and an operator's cannot impersonate a processor. Unset, `token_file`
serves both, as before.

Rotation: SIGHUP re-reads both files. A token that changed keeps working for
`coordinator.token_grace_ms`, so processors on other hosts can be given the new file
meanwhile; then only the new one is accepted. Tokens are compared in constant time
and never logged.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.wire.token import load_or_create_token

__all__ = ["Credentials", "Kind", "Refused"]

log = logging.getLogger("baton.coordinator.api")

Kind = Literal["operator", "processor"]


class Refused(Exception):
    """A caller without the right credential; `status` is 401 (none valid) or 403."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass
class _Secrets:
    """One kind's accepted tokens: the current one and, for a while, replaced ones."""

    current: bytes
    retiring: dict[bytes, float] = field(default_factory=dict)   # token -> accepted until

    def accepts(self, given: bytes, now: float) -> bool:
        ok = hmac.compare_digest(given, self.current)
        for token, until in list(self.retiring.items()):
            if now >= until:
                del self.retiring[token]
            elif hmac.compare_digest(given, token):
                ok = True
        return ok

    def replace(self, new: bytes, until: float) -> bool:
        if hmac.compare_digest(new, self.current):
            return False
        self.retiring[self.current] = until
        self.current = new
        return True


class Credentials:
    """The tokens the API accepts, by kind.

    Args:
        operator_file: `coordinator.token_file` (created when missing).
        processor_file: `coordinator.processor_token_file`, or None: operators' serves both.
        grace_s: how long a replaced token is still accepted after `reload()`.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, operator_file: Path, processor_file: Path | None, grace_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.files: dict[Kind, Path] = {"operator": operator_file,
                                        "processor": processor_file or operator_file}
        self.separate = processor_file is not None and processor_file != operator_file
        self.grace_s, self._clock = grace_s, clock
        own: list[Kind] = ["operator", "processor"] if self.separate else ["operator"]
        self._own = own
        self._secrets = {kind: _Secrets(load_or_create_token(self.files[kind]).encode())
                         for kind in own}
        self._secrets.setdefault("processor", self._secrets["operator"])

    def check(self, kind: Kind, given: str | None) -> None:
        """Accept `given` for an endpoint of `kind`, or raise `Refused`."""
        now = self._clock()
        token = (given or "").encode()
        if self._secrets[kind].accepts(token, now):
            return
        other: Kind = "processor" if kind == "operator" else "operator"
        if self.separate and self._secrets[other].accepts(token, now):
            key = "token_file" if kind == "operator" else "processor_token_file"
            raise Refused(403, f"a {other} token cannot call {kind} endpoints (see "
                          f"coordinator.{key})")
        raise Refused(401, "missing or wrong bearer token (see coordinator.token_file)")

    def reload(self) -> list[Kind]:
        """Re-read the token files (SIGHUP); returns the kinds whose token changed.

        Raises:
            TokenError: a file became unreadable or too open; the old tokens stay.
        """
        fresh = {kind: load_or_create_token(self.files[kind]).encode() for kind in self._own}
        until = self._clock() + self.grace_s
        changed = [kind for kind, token in fresh.items()
                   if self._secrets[kind].replace(token, until)]
        for kind in changed:
            log.warning("the %s token was replaced (%s); the old one is accepted for %.0f s "
                        "more", kind, self.files[kind], self.grace_s)
        return changed
