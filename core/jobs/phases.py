"""What a JobWorkflow knows beyond its eventlog: the messages it heard and the phase it is in
(docs/jobs.md). Frozen; every change is one of the pure `on_*`/`with_*` steps below.

The eventlog (`core.jobs.state_machine`) holds what happened to the job; this holds what the workflow
must remember to act: the fleet's answer to its placement request, a stop asked by its run (the first
reason wins, a later abort shortens the grace period, a lost instance ends the job at once), and whether
the stop sent to the agent had a grace period.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from core.status import JobTerminationReason
from core.wire.job_messages import Placement, TerminateJobRequest
from core.wire.messages import JobOutcome

LOST = JobTerminationReason.INSTANCE_UNREACHABLE


class JobPhase(StrEnum):
    PLACING = "placing"  # waiting for its fleet's answer
    WAITING_FOR_CAPACITY = "waiting-for-capacity"  # its fleet queued it, and the job has logged so
    REFUSED = "refused"  # its fleet cannot ever place it
    WITHDRAWN = "withdrawn"  # stopped before placement: the fleet must drop its replica's request
    PLACED = "placed"  # on an instance; provisioning, pulling or running
    STOPPING = "stopping"  # a graceful stop went to the agent
    KILLED = "killed"  # a stop with no grace period went to the agent


class PlacementOutcome(StrEnum):
    """What a job waiting for placement does next."""

    PLACED = "placed"
    WITHDRAW = "withdraw"  # the run asked it to stop first
    REFUSED = "refused"
    LOG_WAITING = "log-waiting"  # queued: say "waiting for capacity", once


class JobControl(BaseModel):
    model_config = ConfigDict(frozen=True)

    phase: JobPhase = JobPhase.PLACING
    placement: Placement | None = None  # the first grant heard
    refused: str | None = None  # the first refusal heard
    queued: bool = False  # the fleet said it is queued
    terminate: TerminateJobRequest | None = None
    lost: bool = False  # the fleet lost the instance: no stop to send, no task to remove
    peers_started: bool = False  # the jobs it waits for (`startup_order`) have started: its run said so
    ended: JobOutcome | None = None  # how its task ended, as its instance's watch told (the first word)

    # --- the messages it hears -----------------------------------------------------------------

    def on_terminate(self, request: TerminateJobRequest) -> JobControl:
        """The first reason wins; a later abort still shortens the grace period, and a lost instance
        ends the job at once whatever it was terminating for."""
        lost = self.lost or request.reason == LOST or request.instance_gone
        current = self.terminate
        if current is None or (request.abort and not current.abort):
            reason = request.reason if current is None else current.reason
            current = request.model_copy(update={"reason": reason})
        return self.model_copy(update={"terminate": current, "lost": lost})

    def on_placed(self, placement: Placement) -> JobControl:
        return self if self.placement is not None else self.model_copy(update={"placement": placement})

    def on_refused(self, reason: str) -> JobControl:
        return self if self.refused is not None else self.model_copy(update={"refused": reason})

    def on_queued(self) -> JobControl:
        return self.model_copy(update={"queued": True})

    def on_peers_started(self) -> JobControl:
        return self.model_copy(update={"peers_started": True})

    def on_task_ended(self, outcome: JobOutcome, task_id: str) -> JobControl:
        """The instance's watch may tell twice (a watch started again lists every ended task): the first
        word stands. Another task's end is not this job's: a host may keep the task of another deployment
        whose job had this job's workflow id (the same project and run name), and its end is ignored."""
        if outcome.task_id is not None and outcome.task_id != task_id:
            return self
        return self if self.ended is not None else self.model_copy(update={"ended": outcome})

    # --- placement --------------------------------------------------------------------------------

    def placement_outcome(self) -> PlacementOutcome | None:
        """None: keep waiting. A grant wins over a stop that came with it (the clean-up frees it)."""
        if self.placement is not None:
            return PlacementOutcome.PLACED
        if self.terminate is not None:
            return PlacementOutcome.WITHDRAW
        if self.refused is not None:
            return PlacementOutcome.REFUSED
        if self.queued and self.phase == JobPhase.PLACING:
            return PlacementOutcome.LOG_WAITING
        return None

    def after(self, outcome: PlacementOutcome) -> JobControl:
        """The phase a placement outcome leads to."""
        return self.with_phase(_PHASE_AFTER[outcome])

    def with_phase(self, phase: JobPhase) -> JobControl:
        return self.model_copy(update={"phase": phase})

    @property
    def instance(self) -> str | None:
        return self.placement.instance_name if self.placement is not None else None

    def must_release(self) -> bool:
        """Capacity to give back: granted, or maybe on its way to a job withdrawn while waiting."""
        return self.placement is not None or self.phase == JobPhase.WITHDRAWN

    # --- stopping ---------------------------------------------------------------------------------

    def abort_requested(self) -> bool:
        """An abort arrived after a graceful stop was sent: the job is still in its grace period."""
        return self.phase != JobPhase.KILLED and self.terminate is not None and self.terminate.abort

    def stop_sent(self, request: TerminateJobRequest) -> JobControl:
        return self.with_phase(JobPhase.KILLED if request.abort else JobPhase.STOPPING)


_PHASE_AFTER = {
    PlacementOutcome.PLACED: JobPhase.PLACED,
    PlacementOutcome.WITHDRAW: JobPhase.WITHDRAWN,
    PlacementOutcome.REFUSED: JobPhase.REFUSED,
    PlacementOutcome.LOG_WAITING: JobPhase.WAITING_FOR_CAPACITY,
}


def grace_seconds(request: TerminateJobRequest, stop_duration: int | None) -> float:
    """How long the agent lets a stopped job end by itself before SIGKILL: none for an abort."""
    if request.abort or stop_duration is None:
        return 0.0
    return float(stop_duration)
