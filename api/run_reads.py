"""A project's runs read through the API (docs/teams.md#runs): what `ferry ps`, `logs`, `events`, `wait`
and `apply`'s following read, each the store's own record. Every route takes the `read runs` action in the
project of its path; a run or job of another project does not exist for it (404), as for a caller who
is not a member of that project (403 first)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Response

from api.auth import Refused, caller, require, store_of
from api.messages import RUN_REFUSALS, RunRow
from core.teams.roles import Action, Caller
from store import EventRecord, JobSubmissionRecord, RunRecord
from store.repository import Store
from store.run_reads import runs_with_jobs

router = APIRouter(prefix="/api/projects/{project}", responses=RUN_REFUSALS)

NEXT_OFFSET = "X-Ferry-Next-Offset"  # a log read's next offset, beside its bytes


def readable_run(store: Store, who: Caller, project: str, run_id: str) -> RunRecord:
    """The run with this id, when `who` may read the project's runs and it is the project's; else 403/404."""
    require(who, Action.READ_RUNS, project)
    run = store.get_run(run_id)
    if run is None or run.project != project:
        raise Refused(404, f"no run with id {run_id} in project {project}")
    return run


@router.get("/runs")
def list_runs(
    project: str,
    active_only: bool = False,
    limit: int = Query(100, ge=1, le=10_000),
    who: Caller = Depends(caller),
    store: Store = Depends(store_of),
) -> list[RunRecord]:
    require(who, Action.READ_RUNS, project)
    return store.list_runs(project, active_only=active_only, limit=limit)


@router.get("/table")
def runs_table(
    project: str,
    active_only: bool = False,
    limit: int = Query(100, ge=1, le=10_000),
    who: Caller = Depends(caller),
    store: Store = Depends(store_of),
) -> list[RunRow]:
    """`ferry ps`'s rows in one answer: each run with its jobs."""
    require(who, Action.READ_RUNS, project)
    rows = runs_with_jobs(store, project, active_only=active_only, limit=limit)
    return [RunRow(run=run, jobs=jobs) for run, jobs in rows]


@router.get("/runs/{ref}")
def get_run(
    project: str,
    ref: str,
    by_id: bool = False,
    who: Caller = Depends(caller),
    store: Store = Depends(store_of),
) -> RunRecord:
    """The latest run named `ref` (the run with this id when there is none, or with `by_id`)."""
    require(who, Action.READ_RUNS, project)
    run = None if by_id else store.find_run(project, ref)
    if run is None:
        found = store.get_run(ref)
        run = found if found is not None and found.project == project else None
    if run is None:
        raise Refused(404, f"no run named {ref!r} in project {project!r} (see ferry ps -a)")
    return run


@router.get("/runs/{run_id}/jobs")
def list_jobs(
    project: str, run_id: str, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> list[JobSubmissionRecord]:
    readable_run(store, who, project, run_id)
    return store.list_job_submissions(run_id)


@router.get("/runs/{run_id}/tasks")
def list_tasks(
    project: str, run_id: str, who: Caller = Depends(caller), store: Store = Depends(store_of)
) -> list[RunRecord]:
    """A pipeline's task runs (docs/pipelines.md)."""
    readable_run(store, who, project, run_id)
    return store.list_pipeline_tasks(run_id)


@router.get("/runs/{run_id}/events")
def read_events(
    project: str,
    run_id: str,
    job: str | None = None,
    after: int = -1,
    every: bool = False,
    who: Caller = Depends(caller),
    store: Store = Depends(store_of),
) -> list[EventRecord]:
    """One eventlog after `after` (the run's own, or `job`'s); with `every`, the run's and its jobs'."""
    readable_run(store, who, project, run_id)
    return store.read_all_events(run_id) if every else store.read_events(run_id, job or None, after)


@router.get("/jobs/{job_id:path}/log", response_class=Response)
def read_log(
    project: str,
    job_id: str,
    offset: int = Query(0, ge=0),
    since: float | None = None,
    who: Caller = Depends(caller),
    store: Store = Depends(store_of),
) -> Response:
    """A job submission's log from `offset` (or from its first chunk stored at or after `since`), as
    bytes; the next offset in X-Ferry-Next-Offset."""
    job = store.get_job_submission(job_id)
    if job is None:
        require(who, Action.READ_RUNS, project)
        raise Refused(404, f"no job {job_id} in project {project}")
    readable_run(store, who, project, job.run_id)
    if since is not None:
        start = store.log_offset_since(job_id, since)
        offset = job.log_size if start is None else start
    data, next_offset = store.read_log(job_id, offset)
    return Response(data, media_type="application/octet-stream", headers={NEXT_OFFSET: str(next_offset)})
