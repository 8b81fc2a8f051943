"""A run that continues as new in the middle of its life goes on as if it had not (docs/runs.md).

`RunInput.continue_as_new_each_step` makes RunWorkflow continue as new after every step, so each phase —
active with a replica retried in place, pending on its backoff timer, resubmitted, terminating — starts
from the carried `RunMachine` at least once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle, WorkflowHistory

from core.runs.state_machine import replay_run
from core.status import JobStatus, RunStatus, RunTerminationReason
from core.wire import activity_names as names
from core.wire.messages import JobOutcome
from core.wire.run_messages import RunResult
from core.wire.workflow_ids import run_workflow_id
from tests.workflows.doubles import BLOCK, TRAP, exited
from tests.workflows.harness import POLL, PROJECT, WAIT_LIMIT, Harness, configuration, named
from workflows.run import RunWorkflow

RETRY_ON_ERROR = {"on_events": ["error"], "duration": "1h"}


async def start_continuing(
    harness: Harness, conf: Any, name: str = "train"
) -> WorkflowHandle[Any, RunResult]:
    inp = await harness.run_input(conf, name)
    return await harness.client.start_workflow(
        RunWorkflow.run,
        inp.model_copy(update={"continue_as_new_each_step": True}),
        id=run_workflow_id(PROJECT, name),
        task_queue=harness.queue,
    )


_UPDATE_ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED


def _started(history: WorkflowHistory) -> Any:
    return history.events[0].workflow_execution_started_event_attributes


async def execution_histories(handle: WorkflowHandle[Any, Any]) -> list[WorkflowHistory]:
    """The histories of the executions the run's workflow id went through, oldest first."""
    histories = [await handle.fetch_history()]
    while run_id := _started(histories[0]).continued_execution_run_id:
        earlier = handle._client.get_workflow_handle(handle.id, run_id=run_id)
        histories.insert(0, await earlier.fetch_history())
    return histories


async def executions(handle: WorkflowHandle[Any, Any]) -> int:
    """How many executions the run's workflow id went through (1 + its continue-as-new count)."""
    return len(await execution_histories(handle))


async def continued_after_update(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the execution that accepted an update (the stop) continued as new, ended or not."""
    histories = await execution_histories(handle)
    accepted = [
        n
        for n, history in enumerate(histories)
        if any(event.event_type == _UPDATE_ACCEPTED for event in history.events)
    ]
    return bool(accepted) and accepted[-1] < len(histories) - 1


async def check_continued_log(harness: Harness, handle: WorkflowHandle[Any, Any], result: RunResult) -> None:
    """The stored log has no gap and no repeat across executions, and replays to the run's last state."""
    stored = harness.run_events()
    replayed = replay_run(stored)
    assert (replayed.status, replayed.termination_reason) == (result.status, result.termination_reason)
    described = await harness.describe(handle)
    assert described.first_seq > 0
    assert described.events == stored[described.first_seq :]
    assert described.state == replayed


async def test_pending_run_continued_as_new_waits_out_its_backoff_and_resubmits(harness: Harness) -> None:
    harness.backend.watch_script = {(0, 0, 0): exited(1), (0, 0, 1): exited(0)}
    handle = await start_continuing(harness, configuration(retry=RETRY_ON_ERROR))
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)
    events = harness.run_events()
    assert [e.context["status"] for e in named(events, "status")] == [
        "running",
        "pending",
        "submitted",
        "running",
        "terminating",
    ]
    [pending] = named(events, "status", status="pending")
    [retry] = named(events, "retry")
    assert retry.context == {"replicas": [0], "attempt": 0, "backoff": 15}
    assert retry.timestamp - pending.timestamp >= 15  # the timer survived the continue-as-new
    assert [harness.backend.jobs[k].status for k in [(0, 0, 0), (0, 0, 1)]] == ["failed", "done"]
    assert await executions(handle) >= 4
    await check_continued_log(harness, handle, result)


async def test_run_continued_as_new_retries_in_place_and_stops_once(harness: Harness) -> None:
    backend = harness.backend
    # Replica 0 ignores SIGTERM: the run stays terminating until the test ends it, so it is sure to continue
    # as new after the stop (once its other news is settled), not only when the timing happens to allow.
    backend.watch_script = {(0, 0, 0): TRAP, (1, 0, 0): exited(1), (1, 0, 1): BLOCK}
    handle = await start_continuing(harness, configuration("service", replicas=2, retry=RETRY_ON_ERROR))
    # Watched through the store's records, not by query: a query may land between two executions.
    await harness.wait_until(
        "replica 1's second submission to run",
        lambda: (job := backend.jobs.get((1, 0, 1))) is not None and job.status == JobStatus.RUNNING.value,
    )
    await harness.stop(handle)
    deadline = time.monotonic() + WAIT_LIMIT
    while not await continued_after_update(handle):
        assert time.monotonic() < deadline, "the terminating run never continued as new"
        await asyncio.sleep(POLL)
    [graceful] = backend.called(names.STOP_TASK, (0, 0, 0))
    backend.finish_watch(
        (0, 0, 0),
        JobOutcome(termination_reason=graceful.reason, termination_message=graceful.message, exit_status=143),
    )
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.STOPPED_BY_USER,
    )
    events = harness.run_events()
    [retry] = named(events, "retry")
    assert retry.context == {"replicas": [1], "attempt": 0, "backoff": 0}
    assert named(events, "job-submit", replica=0, submission=1) == []
    # Each running job was told to stop once, although the run continued as new after the stop.
    assert len(backend.called(names.STOP_TASK, (0, 0, 0))) == 1
    assert len(backend.called(names.STOP_TASK, (1, 0, 1))) == 1
    assert await executions(handle) >= 3
    await check_continued_log(harness, handle, result)
