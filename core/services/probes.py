"""Readiness: a replica is ready once each of its probes has passed `ready_after` times in a row.

With no probes configured, a replica is probed by connecting to its port (one success makes it ready).
A ready replica whose probe fails becomes unready (no new requests) until that probe passes `ready_after`
times in a row again. Pure: activities.services runs the requests and folds their results in here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from core.wire.services import ReplicaState

PORT_PROBE = "port"  # the `url` of the probe used when a service has none: a TCP connection


class ProbeStatus(BaseModel):
    """One probe's record for one replica, stored with it (`ferry ps` shows it)."""

    model_config = ConfigDict(frozen=True)

    url: str  # the probe's path, or PORT_PROBE
    ready_after: int = 1
    streak: int = 0  # successes in a row
    passed: bool = False  # reached ready_after since the last failure
    last: str = ""  # the last result: "200", "connection refused", ...

    def after(self, ok: bool, result: str) -> ProbeStatus:
        streak = self.streak + 1 if ok else 0
        passed = streak >= self.ready_after
        return self.model_copy(update={"streak": streak, "passed": passed, "last": result})


def replica_state(current: ReplicaState, probes: list[ProbeStatus]) -> ReplicaState:
    """The replica's state after its probes' latest results; a draining replica stays draining."""
    if current == ReplicaState.DRAINING:
        return current
    if all(probe.passed for probe in probes):
        return ReplicaState.READY
    if current in (ReplicaState.READY, ReplicaState.UNREADY):
        return ReplicaState.UNREADY
    return ReplicaState.PROBING


def probe_summary(state: str, probes: list[ProbeStatus]) -> str:
    """What `ferry ps` shows of a replica: its state, and each probe's streak out of what it needs."""
    if not probes:
        return state
    shown = " ".join(f"{min(probe.streak, probe.ready_after)}/{probe.ready_after}" for probe in probes)
    return f"{state} {shown}"
