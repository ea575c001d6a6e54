"""The handoff table: the rule of every (phase, event) pair, none implicit (pure).

`TRANSITIONS` is complete (every phase meets every event); the rules are in
orchestrator/core/handoff/rules.py and the rules of operation in
orchestrator/core/handoff/machine.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from orchestrator.core.handoff.events import (
    Activated,
    Cancel,
    Event,
    LagReported,
    Phase,
    ProcessorLost,
    ReleaseAcked,
    ReplicaFailed,
    Tick,
    WarmupStarted,
)
from orchestrator.core.handoff.rules import (
    Rule,
    abandon_target,
    activate_after_release,
    activate_without_release,
    cancel,
    duplicate_release,
    go,
    ignore,
    local,
    note_lag,
    note_source_gone,
    on_loss,
    on_timeout,
    release_if_caught_up,
    remote,
)

__all__ = ["TRANSITIONS"]


_CATCH_UP: Final = on_timeout(
    lambda c: c.catch_up_timeout_s,
    cancel("catch-up timeout: {target} still lags {lag} records (acceptable "
           "{acceptable_lag}) after {elapsed:.1f} s"))


_UNSOLICITED_ACTIVATION: Final = remote(
    "reports the task active but was never told to activate it",
    "two processors may now write the task's output: stop that processor")
_TARGET_FAILED: Final = "target {target} failed the task: {error}"
_FORCED: Final = "{source} {cause}: declared dead; {target} activates from committed offsets"
P = Phase


TRANSITIONS: Final[Mapping[tuple[Phase, type[Event]], Rule]] = MappingProxyType({
    # planned: StartWarmup(target) sent.
    (P.PLANNED, WarmupStarted): go(P.CATCHING_UP),
    (P.PLANNED, LagReported): note_lag,
    (P.PLANNED, ReleaseAcked): remote("acknowledged a release that was never sent",
                                      "check which processor reports this task"),
    (P.PLANNED, Activated): _UNSOLICITED_ACTIVATION,
    (P.PLANNED, ProcessorLost): on_loss(
        source=activate_without_release(_FORCED.replace("{cause}", "was lost")),
        target=cancel("target {target} was lost before catching up")),
    (P.PLANNED, Tick): _CATCH_UP,
    (P.PLANNED, Cancel): cancel("cancelled: {cancel}"),
    (P.PLANNED, ReplicaFailed): cancel(_TARGET_FAILED),
    # catching_up: the target replays S2; release once lag <= acceptable_lag.
    (P.CATCHING_UP, WarmupStarted): ignore,
    (P.CATCHING_UP, LagReported): release_if_caught_up,
    (P.CATCHING_UP, ReleaseAcked): remote("acknowledged a release that was never sent",
                                          "check which processor reports this task"),
    (P.CATCHING_UP, Activated): _UNSOLICITED_ACTIVATION,
    (P.CATCHING_UP, ProcessorLost): on_loss(
        source=activate_without_release(_FORCED.replace("{cause}", "was lost")),
        target=cancel("target {target} was lost while catching up")),
    (P.CATCHING_UP, Tick): _CATCH_UP,
    (P.CATCHING_UP, Cancel): cancel("cancelled: {cancel}"),
    (P.CATCHING_UP, ReplicaFailed): cancel(_TARGET_FAILED),
    # releasing: SendRelease(source) sent; the source may already have stopped.
    (P.RELEASING, WarmupStarted): ignore,
    (P.RELEASING, LagReported): note_lag,
    (P.RELEASING, ReleaseAcked): activate_after_release,
    (P.RELEASING, Activated): _UNSOLICITED_ACTIVATION,
    (P.RELEASING, ProcessorLost): on_loss(
        source=activate_without_release(_FORCED.replace("{cause}", "was lost while releasing")),
        target=cancel("target {target} was lost during the release; {source} resumes")),
    (P.RELEASING, Tick): on_timeout(
        lambda c: c.release_timeout_s,
        activate_without_release(_FORCED.replace(
            "{cause}", "did not acknowledge the release within {release_timeout_s} s"))),
    (P.RELEASING, Cancel): cancel("cancelled during the release ({cancel}); {source} resumes"),
    (P.RELEASING, ReplicaFailed): cancel(_TARGET_FAILED + "; {source} resumes"),
    # activating: SendActivate(target) sent; the target may be writing output.
    (P.ACTIVATING, WarmupStarted): ignore,
    (P.ACTIVATING, LagReported): ignore,
    (P.ACTIVATING, ReleaseAcked): duplicate_release,
    (P.ACTIVATING, Activated): go(P.DONE),
    (P.ACTIVATING, ProcessorLost): on_loss(
        source=note_source_gone,
        target=abandon_target("target {target} was lost while activating")),
    (P.ACTIVATING, Tick): on_timeout(
        lambda c: c.activate_timeout_s,
        abandon_target("target {target} did not report the task active within "
                       "{activate_timeout_s} s: declared dead")),
    (P.ACTIVATING, ReplicaFailed): abandon_target(_TARGET_FAILED, declare_dead=False),
    (P.ACTIVATING, Cancel): local(
        "too late to cancel, {target} was told to activate; wait for done (then plan "
        "a move back) or for the activation timeout"),
    # done: the target owns the task. Late news is stale.
    (P.DONE, WarmupStarted): ignore,
    (P.DONE, LagReported): ignore,
    (P.DONE, ReleaseAcked): ignore,
    (P.DONE, Activated): ignore,
    (P.DONE, ProcessorLost): ignore,  # the assignor handles the loss of the new owner
    (P.DONE, Tick): ignore,
    (P.DONE, Cancel): local("the move already finished; plan a move back instead"),
    (P.DONE, ReplicaFailed): ignore,  # the new owner's own failure: the core re-places
    # cancelled: the source (or nobody) owns the task.
    (P.CANCELLED, WarmupStarted): ignore,
    (P.CANCELLED, LagReported): ignore,
    (P.CANCELLED, ReleaseAcked): ignore,  # the source was told to resume after this ack
    (P.CANCELLED, Activated): remote(
        "reports the task active after the move was cancelled",
        "it was declared dead or never told to activate; the resumed owner's fencing "
        "rejects its output, but stop that processor"),
    (P.CANCELLED, ProcessorLost): ignore,
    (P.CANCELLED, Tick): ignore,
    (P.CANCELLED, Cancel): ignore,
    (P.CANCELLED, ReplicaFailed): ignore,
})


del P
