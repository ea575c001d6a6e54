"""The replies in force: what each processor was last told, valid while no decision
came since, so a heartbeat that finds the core busy is answered without waiting."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from orchestrator.wire.protocol import HeartbeatReply, HeartbeatRequest

__all__ = ["RepliesInForce"]


class RepliesInForce:
    """Caches each processor's last reply under a decision version, and queues the
    reports answered from the cache until the core can take them in.

    Why safe without the core's lock: a cached reply is the decision in force until a
    lock holder that may change a decision lets go (`publish()`), and a reply is only
    served for the same execution and model generation it was made for."""

    def __init__(self) -> None:
        self.version = 0
        # pid -> (execution, generation, version, reply)
        self._answers: dict[str, tuple[str, int, int, HeartbeatReply]] = {}
        self._inbox: deque[HeartbeatRequest] = deque()

    def publish(self) -> None:
        """A decision may have changed what processors are told: every cached reply is
        stale from now on."""
        self.version += 1

    def remember(self, request: HeartbeatRequest, reply: HeartbeatReply) -> None:
        """Cache `reply` as `request`'s processor's decision in force (a reply carrying
        the model or an invalid execution is never served again)."""
        if reply.alive and reply.same_model:
            self._answers[request.processor_id] = (
                request.execution_id, reply.generation, self.version, reply)

    def forget(self, pid: str) -> None:
        """`pid`'s next reply may differ: do not serve the cached one."""
        self._answers.pop(pid, None)

    def get(self, request: HeartbeatRequest) -> HeartbeatReply | None:
        """The reply `request`'s processor last got, if no decision came since and it
        still holds the same execution and generation."""
        entry = self._answers.get(request.processor_id)
        if entry is None:
            return None
        execution, generation, version, reply = entry
        if (execution, generation, version) != (request.execution_id, request.generation,
                                                self.version):
            return None
        return reply

    def queue(self, request: HeartbeatRequest) -> None:
        """A report answered from the cache, to take in later."""
        self._inbox.append(request)

    def take(self) -> Iterator[HeartbeatRequest]:
        """The queued reports, oldest first, each removed as it is taken."""
        while self._inbox:
            yield self._inbox.popleft()
