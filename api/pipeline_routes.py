"""A project's pipelines started through the API (docs/teams.md#pipelines): what `ferry apply` sends for a
pipeline's file. The route takes the `submit runs` action in the project of its path, as a run's does; the
pipeline is recorded as its caller's (its `user`), never as a name a client chose."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from activities.job_tokens import NO_API_URL, wants_api
from api.auth import caller, require, store_of
from api.messages import RUN_REFUSALS
from api.pipeline_messages import PipelineSubmission, SubmittedPipeline
from api.temporal import one_line_errors, temporal_client
from cli.api import FerryAPI
from cli.errors import FerryError
from cli.run_names import generated_name
from core.configuration.notifications import private_webhooks_allowed, refused_webhook
from core.configuration.pipeline import PipelineConfiguration
from core.settings import Settings
from core.teams.roles import Action, Caller

router = APIRouter(prefix="/api/projects/{project}", responses=RUN_REFUSALS)


@router.post("/pipelines", status_code=201)
async def submit_pipeline(
    project: str, submission: PipelineSubmission, request: Request, who: Caller = Depends(caller)
) -> SubmittedPipeline:
    """The pipeline started (cli.api.FerryAPI.submit_stored_pipeline), its code sent first (`POST code`:
    a `409` with `X-Ferry-Code-Needed` asks for it) and its tasks' `env` as the user applied them."""
    require(who, Action.SUBMIT_RUNS, project)
    client = await temporal_client(request)
    api = FerryAPI(
        client,
        store_of(request),
        project=project,
        authorized_keys=submission.authorized_keys,
        local_starts=request.app.state.local_starts,
    )
    name = submission.run_name or submission.pipeline.name or generated_name()
    with one_line_errors():
        _refuse_what_a_run_would_be(name, submission.pipeline, embedded=request.app.state.embedded)
        record = await api.submit_stored_pipeline(
            submission.pipeline,
            code_hash=submission.code_hash,
            code_name=submission.code_name,
            run_name=name,
            user=who.name,  # the caller, whatever the client says
        )
    return SubmittedPipeline(run=record)


def _refuse_what_a_run_would_be(name: str, pipeline: PipelineConfiguration, *, embedded: bool) -> None:
    """FerryError for what the API refuses of a run (api/project_runs.py), task by task: a webhook to a
    private address where none may go (docs/deployment.md#webhooks), `dstack: true` where jobs have no
    address for the API (docs/teams.md#a-jobs-token)."""
    settings = Settings.from_env()
    private = private_webhooks_allowed(settings.webhooks_allow_private, embedded)
    for index, task in enumerate(pipeline.tasks, start=1):
        for spec in [] if private else task.notifications:
            refused = refused_webhook(spec.url)
            if refused is not None:
                raise FerryError(f"run {name} task {index}: notifications: {refused}")
        if wants_api(task) and settings.job_api_url is None:
            raise FerryError(f"run {name} task {index}: {NO_API_URL}")
