"""An array's elements in one workflow (workflows/elements.py, docs/runs.md#arrays): each element is a job
submission with its own eventlog, folded by `core.jobs.state_machine` as a JobWorkflow's is, and its own
JobControl for what it heard; what this module adds is where each element is in its life, and which
elements a step of the workflow takes into each batch (an enqueue, a start, a stop, a clean-up).

The phases, in order: NEW (its request not yet sent to the fleet) -> PLACING -> STARTING (in a start batch)
-> RUNNING -> ENDED (its process has ended, or it never started) -> CLEANING (its task being removed, its
capacity released) -> DONE (its last event logged). An element in a batch in flight is `busy`: it waits for
the batch's answer before anything else is done to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core.eventlog import Event
from core.jobs.phases import JobControl, PlacementOutcome, grace_seconds
from core.jobs.state_machine import JobState, apply_job_event
from core.jobs.transitions import (
    INSTANCE_LOST,
    NO_END_AFTER_STOP,
    EventSpec,
    fatal,
    lost_task_note,
    outcome_events,
    stop_event,
)
from core.status import JobTerminationReason
from core.wire.job_messages import JobInput, TerminateJobRequest
from core.wire.workflow_ids import job_submission_id

NO_CAPACITY = JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY


class ElementPhase(StrEnum):
    NEW = "new"
    PLACING = "placing"
    STARTING = "starting"
    RUNNING = "running"
    ENDED = "ended"
    CLEANING = "cleaning"
    DONE = "done"


# The phases that count against `max_parallel`, as a Slurm array's slot is free once its task has ended:
# the next element is enqueued while the last one is cleaned up (its fleet keeps the bound of capacity).
ACTIVE = frozenset({ElementPhase.PLACING, ElementPhase.STARTING, ElementPhase.RUNNING})


@dataclass
class Element:
    """One element's submission: its input, its eventlog and state, what it heard, and its phase."""

    input: JobInput
    id: str
    state: JobState
    events: list[Event] = field(default_factory=list)
    control: JobControl = field(default_factory=JobControl)
    phase: ElementPhase = ElementPhase.NEW
    busy: bool = False  # in a batch in flight
    stop_logged: bool = False  # its stop is in its eventlog
    stop_sent_at: float | None = None  # when a stop went to its agent
    stop_deadline: float | None = None  # its process presumed gone past this, if it has not ended
    sent: int = 0  # events its run has been sent

    def log(self, at: float, name: str, context: dict[str, Any] | None = None) -> None:
        event = Event(
            timestamp=at, name=name, context={k: v for k, v in (context or {}).items() if v is not None}
        )
        self.state = apply_job_event(self.state, event)
        self.events.append(event)

    def log_all(self, at: float, specs: Iterable[EventSpec]) -> None:
        for name, context in specs:
            self.log(at, name, context)

    @property
    def unsent(self) -> bool:
        return self.sent < len(self.events)


def new_element(inp: JobInput, at: float) -> Element:
    """An element as submitted: its `submit` event logged."""
    job_id = job_submission_id(inp.run_id, inp.replica_num, inp.job_num, inp.submission_num)
    context = {
        "replica": inp.replica_num,
        "job": inp.job_num,
        "submission": inp.submission_num,
        "priority": inp.priority,
    }
    submit = Event(timestamp=at, name="submit", context={k: v for k, v in context.items() if v is not None})
    return Element(input=inp, id=job_id, state=apply_job_event(None, submit), events=[submit])


def fleet_not_running(element: Element, at: float) -> None:
    element.log(at, *fatal(NO_CAPACITY, f"its fleet is not running ({element.input.fleet_workflow_id})"))
    element.phase = ElementPhase.ENDED


def placement_step(element: Element, at: float) -> bool:
    """Act on the fleet's answer, if one came; True when the element is placed (to start)."""
    outcome = element.control.placement_outcome()
    if outcome is None:
        return False
    element.control = element.control.after(outcome)
    if outcome == PlacementOutcome.PLACED:
        assert element.control.placement is not None  # PLACED says so
        element.log(at, "alloc", {"instance": element.control.placement.instance_name})
        element.phase = ElementPhase.STARTING
        return True
    if outcome == PlacementOutcome.WITHDRAW:
        log_stop(element, at)
        element.phase = ElementPhase.ENDED
    elif outcome == PlacementOutcome.REFUSED:
        element.log(at, *fatal(NO_CAPACITY, element.control.refused))
        element.phase = ElementPhase.ENDED
    else:
        element.log(at, "memo", {"waiting": "capacity"})
    return False


def log_stop(element: Element, at: float) -> TerminateJobRequest:
    request = element.control.terminate
    assert request is not None  # only once a stop was asked for
    if not element.stop_logged:
        element.log(at, *stop_event(request))
        element.stop_logged = True
    return request


def stop_needed(element: Element) -> TerminateJobRequest | None:
    """A running element's stop to send to its agent now: the first, or an abort after a graceful one.
    None when there is none, or when the fleet lost its instance (nothing to send, it ends at once)."""
    control = element.control
    if element.phase != ElementPhase.RUNNING or control.terminate is None or control.ended is not None:
        return None
    if control.lost:
        return None
    if element.stop_sent_at is None or control.abort_requested():
        return control.terminate
    return None


def stop_sent(element: Element, request: TerminateJobRequest, at: float, margin: float) -> None:
    element.control = element.control.stop_sent(request)
    deadline = at + grace_seconds(request, element.input.stop_duration) + margin
    if element.stop_deadline is not None:
        deadline = min(element.stop_deadline, deadline)
    element.stop_deadline = deadline
    element.stop_sent_at = at


def end_if_over(element: Element, at: float) -> bool:
    """A running element's end, if it has one now: its process ended, its instance lost, or its stop's
    deadline passed. Its events logged; True when it ended."""
    if element.phase != ElementPhase.RUNNING:
        return False
    control = element.control
    outcome = control.ended
    if outcome is None and control.lost:
        outcome = INSTANCE_LOST
    if outcome is None and element.stop_deadline is not None and at >= element.stop_deadline:
        outcome = NO_END_AFTER_STOP
    if outcome is None:
        return False
    if control.terminate is not None:
        log_stop(element, at)
    for name, context in outcome_events(element.state, outcome):
        element.log(at, name, context)
    element.phase = ElementPhase.ENDED
    return True


def started(element: Element, at: float, published: str | None) -> None:
    element.log(at, "pull")
    element.log(at, "start")
    if published:
        element.log(at, "memo", {"ports": published})
    element.phase = ElementPhase.RUNNING


def failed_to_start(element: Element, at: float, reason: JobTerminationReason, note: str) -> None:
    element.log(at, *fatal(reason, note))
    element.phase = ElementPhase.ENDED


def needs_removal(element: Element) -> bool:
    """Its task is on an agent to remove: it was placed, and its instance is not lost."""
    return element.state.allocated and element.control.instance is not None and not element.control.lost


def cleaned(element: Element, at: float, problem: str | None) -> None:
    """Its task removed (or why not), its capacity on its way back: its last events."""
    instance = element.control.instance
    if element.state.allocated and instance is not None:
        if element.control.lost:
            note = lost_task_note(instance, element.control.terminate)
            element.log(at, "exception", {"type": "free", "severity": 1, "note": note})
        elif problem is None:
            element.log(at, "release", {"ranks": "all", "final": True})
        else:
            element.log(at, "exception", {"type": "free", "severity": 1, "note": problem})
        element.log(at, "free")
    reason = element.state.termination_reason
    assert reason is not None  # every way here logged a fatal exception or the job's finish
    element.log(at, "clean", {"status": reason.to_status(), "reason": reason})
    element.phase = ElementPhase.DONE
