"""A run's writes to the store and its FerryStatus, for RunWorkflow (docs/runs.md#the-store).

The run workflow is its run's one writer after the submission: at each step its new events, its status
and its jobs' news go to the store in one `record_run`, with the notifications those events decide
(workflows/notify.py). Each write but the last is a regular activity (activities/records.py says why);
the last is a local activity, the run's last act, since revision LOCAL_LAST_WRITE.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.eventlog import Event
    from core.runs.run_state import RunState
    from core.runs.status_words import status_message
    from core.runs.workflow_messages import RunInput
    from core.status import RunStatus
    from core.wire.messages import RecordJob, RecordRun
    from workflows import activity_stubs, retry_policies
    from workflows.notify import Notifier
    from workflows.search_attributes import SA_STATUS


class RunRecords:
    """What of a run the store has: the events up to `flushed`, the configuration and FerryStatus last
    written; and what is to go with the next write (`job_news`)."""

    def __init__(self, inp: RunInput, state: RunState) -> None:
        carried = inp.carry is not None
        # The events of this execution begin at `first_seq`; earlier ones are in the store.
        self.first_seq = self.flushed = inp.carry.next_seq if inp.carry is not None else 0
        self.job_news: list[RecordJob] = []  # heard from the jobs, to store with the next write
        # The configuration the store's run row has: the run writes it there once another replaces it.
        self._recorded_configuration = inp.configuration
        # FerryStatus as `ferry apply` starts it; continue-as-new keeps it.
        self._published_status = state.status.value if carried else RunStatus.SUBMITTED.value
        self._notifier = Notifier(state.status if carried else None)

    def publish_status(self, state: RunState) -> None:
        """FerryStatus follows the status at each write (not each event: a workflow task that goes through
        TERMINATING to DONE updates it once)."""
        status = state.status.value
        if status != self._published_status:
            workflow.upsert_search_attributes([SA_STATUS.value_set(status)])
            self._published_status = status

    async def write(self, inp: RunInput, state: RunState, events: list[Event], *, last: bool = False) -> None:
        """The run's new `events` (this execution's, from `first_seq`) and `state` to the store; `last`:
        its last write, a local activity that nothing follows but the run's end."""
        start = self.flushed
        new = events[start - self.first_seq :]
        jobs, self.job_news = self.job_news, []
        self.publish_status(state)
        if not new and not jobs:
            return
        # The run row's one writer after its submission (docs/runs.md#the-store): a configuration re-applied
        # in place (`ferry apply` of a changed service or schedule), and a priority set since the last write.
        configuration = inp.configuration
        reconfigured = configuration is not self._recorded_configuration
        reprioritised = any(event.name == "priority" for event in new)
        record = RecordRun(
            run_id=inp.run_id,
            status=state.status,
            termination_reason=state.termination_reason,
            status_message=status_message(state),
            start_seq=start,
            events=new,
            finished_at=state.status_since if state.status.is_finished() else None,
            jobs=jobs,
            configuration=configuration.model_dump_json() if reconfigured else None,
            priority=state.priority if reprioritised else None,
        )
        if last:
            # Its notifications first: no command may follow a local activity in the same step (a replay
            # may hear its end at another point, docs/scaling.md#the-hot-path). Its place among the
            # run's writes, for a task the server refuses and a redo writes again: the history's length.
            await self._notifier.send(inp, new, start, state)  # docs/runs.md#notifications
            order = workflow.info().get_current_history_length()
            await workflow.execute_local_activity(
                activity_stubs.record_run,
                record.model_copy(update={"order": order}),
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=retry_policies.QUICK,
            )
            return
        # A regular activity: activities/records.py says why.
        await workflow.execute_activity(
            activity_stubs.record_run,
            record,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=retry_policies.QUICK,
        )
        self.flushed = start + len(new)
        self._recorded_configuration = configuration
        await self._notifier.send(inp, new, start, state)  # docs/runs.md#notifications
