"""The signals a run's step sends (core.runs.effects): to its jobs, and to its fleet's queue."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.fleets.messages import FLEET_SET_PRIORITY, SetQueuedPriorityRequest
    from core.runs.effects import PeersStarted, SetQueuedPriority, TerminateJob
    from core.wire.job_messages import TerminateJobRequest
    from core.wire.workflow_ids import fleet_workflow_id, job_workflow_id
    from workflows.job import JobWorkflow


def _job(effect: TerminateJob | PeersStarted) -> workflow.ExternalWorkflowHandle[Any]:
    job_id = job_workflow_id(
        workflow.info().workflow_id, effect.replica_num, effect.job_num, effect.submission_num
    )
    return workflow.get_external_workflow_handle(job_id)


async def terminate_job(effect: TerminateJob) -> None:
    request = TerminateJobRequest(reason=effect.reason, message=effect.message, abort=effect.abort)
    await _job(effect).signal(JobWorkflow.terminate, request)


async def tell_peers_started(effect: PeersStarted) -> None:
    await _job(effect).signal(JobWorkflow.peers_started)


async def move_in_queue(project: str, fleet: str, effect: SetQueuedPriority) -> None:
    handle = workflow.get_external_workflow_handle(fleet_workflow_id(project, fleet))
    change = SetQueuedPriorityRequest(request_ids=effect.request_ids, priority=effect.priority)
    await handle.signal(FLEET_SET_PRIORITY, change)
