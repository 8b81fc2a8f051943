"""A run's store writes (docs/runs.md#the-store): since revision LOCAL_RECORDS a local activity in the
workflow task of the step that logged the events, with its place among the run's writes; a run submitted
before writes with a regular activity, as it did (activities/records.py).

The clock of a run's steps goes with it: a local activity's result moves the workflow's clock to the
activity's end, which a replay that finds the result in the history does not do the same way. So every step
of one workflow task takes the time of the task's first step, and a replay logs what the store has.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from core.wire.messages import RecordRun
    from workflows import activity_stubs, retry_policies

# A write that has not ended by then goes as a regular activity: well within the 8 s after which the SDK
# would finish the workflow task without its result, so that the result comes back in the task that
# asked for it.
LOCAL_LIMIT = timedelta(seconds=4)
# RecordRun.order: the execution's number, then its history's length (Temporal ends a history at 51,200).
ORDER_SPAN = 1_000_000
_REGULAR_TIMEOUT = timedelta(seconds=10)


async def store(record: RecordRun, *, local: bool, execution: int) -> None:
    """The run's news to the store: from this workflow task when `local`, else by a regular activity."""
    if not local:
        await _regular(record)
        return
    order = execution * ORDER_SPAN + workflow.info().get_current_history_length()
    record = record.model_copy(update={"order": order})
    try:
        await workflow.execute_local_activity(
            activity_stubs.record_run,
            record,
            schedule_to_close_timeout=LOCAL_LIMIT,
            retry_policy=retry_policies.QUICK,
        )
    except ActivityError:
        await _regular(record)


async def _regular(record: RecordRun) -> None:
    await workflow.execute_activity(
        activity_stubs.record_run,
        record,
        start_to_close_timeout=_REGULAR_TIMEOUT,
        retry_policy=retry_policies.QUICK,
    )


class StepClock:
    """The time of a run's steps: each workflow task's, as its first step saw it (`local`), else the
    workflow's clock as it is (a run submitted before LOCAL_RECORDS)."""

    def __init__(self, local: bool) -> None:
        self._local = local
        self._task: tuple[int, float] | None = None  # a workflow task (its history's length) and its time

    def now(self) -> float:
        now = workflow.now().timestamp()
        if not self._local:
            return now
        task = workflow.info().get_current_history_length()
        if self._task is None or self._task[0] != task:
            self._task = (task, now)
        return self._task[1]
