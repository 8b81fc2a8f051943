"""The agent's batch requests, for an array's elements (docs/jobs.md#batches): many tasks started or removed
in one request, each answered on its own, and a code archive kept once per agent rather than sent with
every task. Pure models, no I/O, shared by the agent (agent/batches.py) and its client."""

from __future__ import annotations

from pydantic import Field

from core.wire.agent_api import JobSpec, TaskInfo, TaskSubmitRequest, _Model

MAX_BATCH = 1024  # tasks in one batch request


class TaskStart(_Model):
    """One task of a start batch: what `POST /api/tasks`, `/job`, `/code` and `/run` take, in one."""

    submit: TaskSubmitRequest
    spec: JobSpec
    code_hash: str | None = Field(
        default=None, pattern="^[0-9a-f]{64}$", description="an archive the agent keeps (PUT /api/code)"
    )


class StartBatch(_Model):
    """`POST /api/batches/start`."""

    tasks: list[TaskStart] = Field(max_length=MAX_BATCH)


class TaskAnswer(_Model):
    """One task's answer in a batch: the task, or what its own request would have been answered (the
    status code and the agent's words)."""

    id: str
    task: TaskInfo | None = None
    status_code: int = 200
    message: str | None = None


class BatchAnswers(_Model):
    """The answer to a batch request: one per task, in the batch's order."""

    answers: list[TaskAnswer]


class CodeKept(_Model):
    """`GET` or `PUT /api/code/<sha256>`: the agent keeps this archive."""

    sha256: str


class RemoveBatch(_Model):
    """`POST /api/batches/remove`: ended tasks removed (one not ended is answered 409, as alone)."""

    ids: list[str] = Field(max_length=MAX_BATCH)
