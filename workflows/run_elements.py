"""A run's side of its array's ElementsWorkflow (workflows/elements.py, docs/runs.md#arrays): the elements
it submits go there by signal, or start that workflow again when it has ended; their stops go the same way.

Which runs have one: an array begun since the patch `array-elements` (read once, at the run's start, and
carried across continue-as-new). Arrays begun before keep a JobWorkflow per element.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.runs.arrays import shard_count, shard_of, shard_parallel
    from core.runs.effects import TerminateJob
    from core.wire.element_messages import (
        ELEMENTS_ADD,
        ELEMENTS_TERMINATE,
        AddElements,
        ElementsInput,
        ElementStop,
        TerminateElements,
    )
    from core.wire.job_messages import JobInput, TerminateJobRequest
    from core.wire.workflow_ids import elements_workflow_id, job_submission_id
    from workflows import signals
    from workflows.elements import ElementsWorkflow
    from workflows.handles import settle

ARRAY_ELEMENTS = "array-elements"


# Elements per signal: a JobInput is about 1.5 KB, and a payload past 512 KB draws the SDK's warning.
_CHUNK = 100


async def add(run_workflow_id: str, elements: list[JobInput], max_parallel: int) -> None:
    """Hand the elements to their shards' ElementsWorkflows, in chunks; start a shard's with its first chunk
    if it is not running."""
    shards = shard_count(max_parallel)
    by_shard: dict[int, list[JobInput]] = {}
    for element in elements:
        by_shard.setdefault(shard_of(element.replica_num, shards), []).append(element)
    for shard, mine in sorted(by_shard.items()):
        share = shard_parallel(max_parallel, shards, shard)
        for at in range(0, len(mine), _CHUNK):
            await _add(
                elements_workflow_id(run_workflow_id, shard), run_workflow_id, mine[at : at + _CHUNK], share
            )


async def _add(workflow_id: str, run_workflow_id: str, elements: list[JobInput], max_parallel: int) -> None:
    first = elements[0]
    request = f"add-r{first.replica_num}-s{first.submission_num}"
    more = AddElements(elements=elements, max_parallel=max_parallel)
    [delivered] = await signals.send(signals.signal(workflow_id, ELEMENTS_ADD, more, request))
    if delivered:
        return
    child = await workflow.start_child_workflow(
        ElementsWorkflow.run,
        ElementsInput(run_workflow_id=run_workflow_id, elements=elements, max_parallel=max_parallel),
        id=workflow_id,
        parent_close_policy=workflow.ParentClosePolicy.ABANDON,
        static_summary=f"the array elements of {run_workflow_id}",
    )
    settle(child)  # its elements' news comes by signal


async def terminate(
    run_workflow_id: str, run_id: str, effects: list[TerminateJob], max_parallel: int
) -> None:
    """Stop these elements, each by its shard; one that has ended ignores it (and an ended workflow all)."""
    shards = shard_count(max_parallel)
    by_shard: dict[int, list[TerminateJob]] = {}
    for effect in effects:
        by_shard.setdefault(shard_of(effect.replica_num, shards), []).append(effect)
    sent = []
    for shard, mine in sorted(by_shard.items()):
        stops = [
            ElementStop(
                job_submission_id=job_submission_id(run_id, e.replica_num, e.job_num, e.submission_num),
                request=TerminateJobRequest(reason=e.reason, message=e.message, abort=e.abort),
            )
            for e in mine
        ]
        first = mine[0]
        request = f"stop-r{first.replica_num}-s{first.submission_num}-{len(mine)}-{int(first.abort)}"
        workflow_id = elements_workflow_id(run_workflow_id, shard)
        sent.append(signals.signal(workflow_id, ELEMENTS_TERMINATE, TerminateElements(stops=stops), request))
    await signals.send(*sent)
