"""A project's runs started, stopped and re-applied through the API (docs/teams.md#runs): what `ferry
apply` and `ferry stop` send. Each route takes the `submit runs` action in the project of its path; the
run is recorded as its caller's (the run's `user`, the stop's `by`), never as a name a client chose."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request

from activities.code import MAX_BYTES
from api.auth import Refused, caller, require, store_of
from api.messages import (
    RUN_REFUSALS,
    DeletedRun,
    DeployedRun,
    RunChecks,
    RunPlan,
    RunSubmission,
    StoredCode,
    SubmittedRun,
)
from api.project_runs import ProjectRuns
from api.temporal import one_line_errors, project_runs
from core.teams.roles import Action, Caller
from core.wire.run_messages import DeployRequest, StopReply, StopRequest
from store.repository import Store

router = APIRouter(prefix="/api/projects/{project}", responses=RUN_REFUSALS)


@router.post("/code", status_code=201)
async def put_code(
    project: str, request: Request, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> StoredCode:
    """A run's code archive (the body, as `ferry apply` packs it), stored once by its hash."""
    require(who, Action.SUBMIT_RUNS, project)
    if int(request.headers.get("content-length") or 0) > MAX_BYTES:
        raise Refused(413, f"the code is too big to send with the run (over {MAX_BYTES // 2**20} MiB)")
    data = await request.body()
    if len(data) > MAX_BYTES:
        raise Refused(413, f"the code is too big to send with the run (over {MAX_BYTES // 2**20} MiB)")
    return StoredCode(code_hash=await asyncio.to_thread(store.put_code, data))


@router.post("/runs", status_code=201)
async def submit_run(
    project: str, submission: RunSubmission, request: Request, who: Caller = Depends(caller)
) -> SubmittedRun:
    require(who, Action.SUBMIT_RUNS, project)
    runs = await project_runs(request, project)
    with one_line_errors():
        return await runs.submit(submission, user=who.name)


@router.post("/plans")
def plan_run(
    project: str, checks: RunChecks, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> RunPlan:
    """`ferry apply`'s plan: who would submit the run, and where it would run."""
    require(who, Action.SUBMIT_RUNS, project)
    return ProjectRuns(store, None, project).plan(checks.configuration, who.name)


@router.post("/runs/{name}/checks", status_code=204)
async def check_run(
    project: str, name: str, checks: RunChecks, request: Request, who: Caller = Depends(caller)
) -> None:
    """What a submission of this name would be refused for first (a cycle of dependencies, a secret not
    set), said before `ferry apply` stops an active run of the name to submit it anew."""
    require(who, Action.SUBMIT_RUNS, project)
    runs = await project_runs(request, project)
    with one_line_errors():
        await runs.check(name, checks.configuration)


@router.post("/runs/{name}/stop")
async def stop_run(
    project: str, name: str, stop: StopRequest, request: Request, who: Caller = Depends(caller)
) -> StopReply:
    require(who, Action.SUBMIT_RUNS, project)
    runs = await project_runs(request, project)
    with one_line_errors():
        return await runs.stop(name, abort=stop.abort, by=who.name)  # the caller, whatever `by` says


@router.delete("/runs/{ref}")
async def delete_run(project: str, ref: str, request: Request, who: Caller = Depends(caller)) -> DeletedRun:
    """A finished run forgotten: its workflows, records, events and logs (409 for an active one)."""
    require(who, Action.SUBMIT_RUNS, project)
    runs = await project_runs(request, project)
    with one_line_errors():
        return await runs.delete(ref)


@router.post("/runs/{name}/deploy")
async def deploy_run(
    project: str, name: str, deploy: DeployRequest, request: Request, who: Caller = Depends(caller)
) -> DeployedRun:
    """An active service's or scheduled run's configuration re-applied in place."""
    require(who, Action.SUBMIT_RUNS, project)
    runs = await project_runs(request, project)
    with one_line_errors():
        return await runs.deploy(name, deploy.configuration, by=who.name)
