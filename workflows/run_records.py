"""A run's writes to the store (docs/runs.md#the-store).

Since the revision LOCAL_RECORDS a step's write is a local activity that no step waits for: it runs in
the workflow task of the step that logged the events and costs the run's history one marker. Its end
wakes nothing that sends a command. When a local activity's end is heard differs between a run and its
replay (the SDK may finish a workflow task with the activity's marker and tell the workflow in the next
task), so a step that waited for it would send its next commands in another task on replay: a
nondeterminism error (docs/scaling.md#the-hot-path). What a write's end changes is only what the next
write carries: every write carries all the run's events and jobs' news that no ended write has carried,
and says its place among the run's writes (`RecordRun.order`), so that the store keeps the latest.

The run waits for its last write only as its very last act (`ended`): a workflow that completes with a
local activity in flight drops it. Nothing but the workflow's completion follows, which a replay may send
one workflow task earlier than the run did, and Temporal's replay takes that
(tests/workflows/test_local_records.py). A run submitted before the revision writes each step by a regular
activity, which the step waits for, as it did.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.eventlog import Event
    from core.runs.run_state import RunState
    from core.runs.status_words import status_message
    from core.runs.workflow_messages import RunCarry, RunInput
    from core.wire.messages import RecordJob, RecordRun
    from workflows import activity_stubs, retry_policies

_TIMEOUT = timedelta(seconds=10)  # one attempt's; a local write is retried without end, as a regular one
# RecordRun.order: the execution's number, its history's length when the workflow task began (Temporal
# ends a history at 51,200 events), then the write's number in that task.
_HISTORY_SPAN = 100_000
_TASK_SPAN = 1_000


@dataclass(frozen=True)
class _Write:
    number: int  # in this execution
    end_seq: int  # the run's events before it are in it
    jobs_end: int  # the jobs' news before it (counted from the execution's first) are in it
    configuration: Any  # the run's configuration it stored


class RunWrites:
    """What the store has of this execution's run (`written`, `configuration`) and what the writes not yet
    heard to end carry (`unwritten_jobs`); the run row's one writer after its submission."""

    def __init__(
        self, *, local: bool, execution: int, written: int, jobs: list[RecordJob], configuration: Any
    ) -> None:
        self.local = local
        self.execution = execution
        self.written = written  # the run's events before this seq are in the store
        self.configuration = configuration  # the run row's
        self.unwritten_jobs = list(jobs)  # sent by writes not heard to end
        self._jobs_before = 0  # jobs' news taken off unwritten_jobs, as their writes ended
        self._issued = 0
        self._heard = 0  # the latest write heard to end
        self._task = (-1, 0)  # the workflow task's history length, and its writes so far

    def carried_unwritten(self, carry: RunCarry) -> bool:
        """Whether the last execution continued as new with writes in flight (or not heard to end)."""
        return bool(carry.unwritten or carry.unwritten_jobs or not carry.configuration_written)

    def record(
        self, inp: RunInput, state: RunState, unwritten: list[Event], fresh_jobs: list[RecordJob]
    ) -> RecordRun:
        """The run row's one write after its submission: its status, a configuration re-applied in place
        (`ferry apply` of a changed service or schedule) and a priority set, with all that no ended write
        carried: the run's events from `written` on (`unwritten`) and the jobs' news of the writes not
        heard to end, then `fresh_jobs`."""
        self.unwritten_jobs += fresh_jobs
        configuration = inp.configuration
        reconfigured = configuration is not self.configuration
        return RecordRun(
            run_id=inp.run_id,
            status=state.status,
            termination_reason=state.termination_reason,
            status_message=status_message(state),
            start_seq=self.written,
            events=unwritten,
            finished_at=state.status_since if state.status.is_finished() else None,
            jobs=list(self.unwritten_jobs),
            configuration=configuration.model_dump_json() if reconfigured else None,
            priority=state.priority if any(event.name == "priority" for event in unwritten) else None,
        )

    async def write(self, record: RecordRun, configuration: Any) -> None:
        """Write `record` (made by `record`): a local activity that nothing waits for, or a regular one
        this waits for in a run that predates the revision."""
        self._issued += 1
        done = _Write(
            number=self._issued,
            end_seq=record.start_seq + len(record.events),
            jobs_end=self._jobs_before + len(record.jobs),
            configuration=configuration,
        )
        if self.local:
            record = record.model_copy(update={"order": self._order()})
        if not self.local:
            await workflow.execute_activity(
                activity_stubs.record_run,
                record,
                start_to_close_timeout=_TIMEOUT,
                retry_policy=retry_policies.QUICK,
            )
            self._ended(done)
            return
        handle = workflow.start_local_activity(
            activity_stubs.record_run,
            record,
            start_to_close_timeout=_TIMEOUT,
            retry_policy=retry_policies.QUICK,
        )
        handle.add_done_callback(lambda task: self._heard_end(task, done))

    def ended(self) -> bool:
        """Whether the latest write was heard to end (it carried all the earlier ones had)."""
        return self._heard == self._issued

    def _order(self) -> int:
        length = workflow.info().get_current_history_length()
        task, writes = self._task
        self._task = (length, writes + 1 if task == length else 1)
        return (self.execution * _HISTORY_SPAN + length) * _TASK_SPAN + self._task[1]

    def _heard_end(self, task: asyncio.Future[Any], done: _Write) -> None:
        # Cancelled only with the execution (it continued as new, which carries what it carried).
        if not task.cancelled() and task.exception() is None:
            self._ended(done)

    def _ended(self, done: _Write) -> None:
        if done.number <= self._heard:
            return  # a later write ended first, and carried all of this one
        self._heard = done.number
        self.written = done.end_seq
        self.configuration = done.configuration
        del self.unwritten_jobs[: done.jobs_end - self._jobs_before]
        self._jobs_before = done.jobs_end
