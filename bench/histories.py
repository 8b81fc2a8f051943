"""Reading a run's Temporal histories: when each step of a single-job run happened after its run's start.

Shared by bench.burst_probe (a burst's runs) and the scale section (one more run among many).
"""

from __future__ import annotations

from typing import Any

from core.wire.workflow_ids import job_workflow_id


def event_time(event: Any) -> float:
    return float(event.event_time.ToDatetime().timestamp())


def event_kind(event: Any) -> str:
    kind = str(event.WhichOneof("attributes")).removesuffix("_event_attributes")
    if kind == "workflow_execution_signaled":
        kind += ":" + event.workflow_execution_signaled_event_attributes.signal_name
    elif kind == "signal_external_workflow_execution_initiated":
        kind += ":" + event.signal_external_workflow_execution_initiated_event_attributes.signal_name
    elif kind == "activity_task_scheduled":
        kind += ":" + event.activity_task_scheduled_event_attributes.activity_type.name
    return kind


def steps(run: list[Any], job: list[Any]) -> dict[str, float]:
    """Each step's time after the run's start (the first occurrence of each)."""
    t0 = event_time(run[0])
    found = {"job started": event_time(job[0])}
    for event in job:
        kind = event_kind(event)
        if kind.startswith(("workflow_execution_signaled", "activity_task_")):
            found.setdefault(kind, event_time(event))
        elif kind == "external_workflow_execution_signaled":
            found.setdefault("its own signal delivered (its last word)", event_time(event))
        elif kind == "workflow_execution_completed":
            found["job completed"] = event_time(event)
    found["run completed"] = event_time(run[-1])
    return {name: at - t0 for name, at in found.items()}


async def history(client: Any, workflow_id: str) -> list[Any]:
    return list((await client.get_workflow_handle(workflow_id).fetch_history()).events)


async def run_and_job(client: Any, run_workflow_id: str) -> tuple[list[Any], list[Any]]:
    """A single-job run's history and its job's."""
    return await history(client, run_workflow_id), await history(
        client, job_workflow_id(run_workflow_id, 0, 0, 0)
    )
