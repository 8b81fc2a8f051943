"""A stuck run stopped from outside (docs/upgrades.md#stopping-a-stuck-run): the events that end it.

A run whose workflow cannot go on cannot log its own end. `ferry stop` of such a run ends its workflows
from outside and removes its tasks (workflows/stuck_stop.py); this decides what its eventlog and its jobs'
then say, from what the store holds. Every active job terminates for the user's reason (its task removed,
its capacity given back), the run becomes TERMINATING (a reason it already had stays) and then clean, as
a stop the workflow had carried out would have logged it. Each event is applied to the replayed state, so
an end the state machines would refuse raises EventlogError and is never stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.eventlog import Event
from core.jobs.state_machine import JobState, apply_job_event, replay_job
from core.jobs.transitions import fatal, job_record_of
from core.runs.state_machine import apply_run_event, replay_run
from core.runs.status_words import status_message
from core.runs.terminating import stop_reason
from core.status import JobStatus, JobTerminationReason, RunStatus
from core.wire.messages import RecordJob, RecordRun

STUCK_EXCEPTION = "stuck"  # the run's exception that says why it was ended from outside


@dataclass(frozen=True)
class StuckStop:
    """How one stuck run is stopped: `abort` as `ferry stop -x`; `note` says which workflow was stuck and
    why; `unremoved`: the jobs (by submission id) whose task could not be removed, and why."""

    run_id: str
    abort: bool
    note: str
    now: float
    unremoved: Mapping[str, str]


def end_stuck_run(
    stop: StuckStop,
    run_events: Sequence[Event],
    job_events: Mapping[str, Sequence[Event]],
    ended_runs: Mapping[str, RecordRun] | None = None,
) -> RecordRun | None:
    """The run's and its jobs' closing events and statuses, for the store; None for a run already finished.
    `job_events`: each of its job submissions' stored eventlog, by submission id. `ended_runs`: a pipeline's
    task runs ended the same way just before, by run id (its running task's end is logged)."""
    run = replay_run(run_events)
    if run.status.is_finished():
        return None
    log = _Log(run, stop.now)
    log.add("exception", type=STUCK_EXCEPTION, severity=1, note=stop.note)
    if run.status != RunStatus.TERMINATING:
        log.add("status", status=RunStatus.TERMINATING, reason=stop_reason(stop.abort))
    reason = log.state.termination_reason
    assert reason is not None  # TERMINATING, just above or before
    job_reason = reason.to_job_termination_reason()
    jobs: list[RecordJob] = []
    finals: dict[tuple[int, int, int], JobState] = {}
    for job_id, events in sorted(job_events.items()):
        if events:
            final, record = _end_job(stop, job_id, events, job_reason)
            finals[(final.replica_num, final.job_num, final.submission_num)] = final
            jobs += [record] if record is not None else []
    for job in log.state.jobs:
        if job.status.is_finished():
            continue
        key = (job.replica_num, job.job_num, job.submission_num)
        # None: a job whose own log never reached the store ends in the run's alone.
        known = finals.get(key)
        if known is None:
            finish = {"status": job_reason.to_status(), "reason": job_reason}
        else:
            finish = {
                "status": final.status,
                "reason": final.termination_reason,
                "exit_status": final.exit_status,
            }
        log.add("job-finish", finish, replica=key[0], job=key[1], submission=key[2])
    task_run = (ended_runs or {}).get(log.state.task_run_id or "") if log.state.task else None
    if task_run is not None:
        log.add("task-end", task=log.state.task, status=task_run.status, reason=task_run.termination_reason)
    log.add("clean", status=reason.to_status(), reason=reason)
    state = log.state
    return RecordRun(
        run_id=stop.run_id,
        status=state.status,
        termination_reason=state.termination_reason,
        status_message=status_message(state),
        start_seq=len(run_events),
        events=log.events,
        finished_at=stop.now,
        jobs=jobs,
    )


def _end_job(
    stop: StuckStop, job_id: str, events: Sequence[Event], reason: JobTerminationReason
) -> tuple[JobState, RecordJob | None]:
    """One job submission's end: terminating for `reason` (or the reason it already had), its task gone
    and its capacity freed, then clean; its final state, and what to store (None: it had already ended)."""
    first = replay_job(events)
    if first.status.is_finished():
        return first, None
    log = _Log(first, stop.now, apply_job_event)
    if first.status != JobStatus.TERMINATING:
        log.add(*fatal(reason, "stopped from outside: its run's workflow was stuck", "cancel"))
    if first.allocated and not first.freed:
        problem = stop.unremoved.get(job_id)
        if problem is not None:
            log.add("exception", type="free", severity=1, note=problem)
        elif not first.released:
            log.add("release", ranks="all", final=True)
        log.add("free")
    terminating: JobState = log.state
    assert terminating.termination_reason is not None  # TERMINATING, just above or before
    log.add("clean", status=terminating.termination_reason.to_status(), reason=terminating.termination_reason)
    state: JobState = log.state
    return state, job_record_of(job_id, stop.run_id, state, len(events), log.events)


class _Log:
    """New events after a stored log, each applied as it is added: an illegal one raises at once."""

    def __init__(self, state: Any, now: float, apply: Callable[[Any, Event], Any] = apply_run_event) -> None:
        self.state = state
        self.events: list[Event] = []
        self._now = now
        self._apply = apply

    def add(self, name: str, context: dict[str, Any] | None = None, /, **more: Any) -> None:
        merged = {**(context or {}), **more}
        event = Event(
            timestamp=self._now, name=name, context={k: v for k, v in merged.items() if v is not None}
        )
        self.state = self._apply(self.state, event)
        self.events.append(event)
