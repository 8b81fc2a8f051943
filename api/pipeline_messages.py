"""What `POST /api/projects/{p}/pipelines` takes and answers (docs/teams.md#pipelines)."""

from __future__ import annotations

from pydantic import Field

from api.messages import Message
from core.configuration.pipeline import PipelineConfiguration
from store import RunRecord


class PipelineSubmission(Message):
    """A pipeline to start (`ferry apply` of a pipeline's file): its tasks with `env` as applied where the
    user applied it, and its code, sent first (`POST /api/projects/{p}/code`)."""

    pipeline: PipelineConfiguration
    run_name: str | None = None
    code_hash: str
    code_name: str
    authorized_keys: list[str] = Field(default_factory=list)  # the user's, for `ferry attach`


class SubmittedPipeline(Message):
    run: RunRecord
