"""The messages of an array's elements' workflow (workflows/elements.py, docs/runs.md#arrays): its signals
from the run, and its batched agent steps, each for many elements in one activity."""

from __future__ import annotations

from pydantic import Field

from core.wire.base import Message
from core.wire.job_messages import JobInput, JobUpdate, TerminateJobRequest
from core.wire.messages import PrepareAndStart, StopTask, TaskRef

# Its signals from the run.
ELEMENTS_ADD = "add_elements"
ELEMENTS_TERMINATE = "terminate_elements"
# `ferry attach` to an element: where its agent lets its user in (docs/attach.md).
ELEMENT_SSH_ENDPOINT = "element_ssh_endpoint"
# The run's signal carrying many jobs' news at once.
RUN_JOB_UPDATES = "job_updates"


class ElementsInput(Message):
    run_workflow_id: str
    elements: list[JobInput] = Field(default_factory=list)
    max_parallel: int = Field(ge=1, description="elements placed, starting or running at once")


class AddElements(Message):
    elements: list[JobInput] = Field(min_length=1)
    max_parallel: int = Field(ge=1)


class ElementRef(Message):
    job_submission_id: str


class ElementStop(Message):
    job_submission_id: str
    request: TerminateJobRequest


class TerminateElements(Message):
    stops: list[ElementStop] = Field(min_length=1)


class JobUpdates(Message):
    updates: list[JobUpdate] = Field(min_length=1)


# --- its activities -------------------------------------------------------------------------------------


class StepFailure(Message):
    """Why one element's step failed: its ApplicationError's type (a termination reason's name), message."""

    type: str | None = None
    message: str


class StartMany(Message):
    steps: list[PrepareAndStart] = Field(min_length=1)


class StartedTask(Message):
    job_submission_id: str
    published: str | None = None  # its container's ports published on other host ports
    failure: StepFailure | None = None


class StartedTasks(Message):
    results: list[StartedTask]


class RemoveMany(Message):
    refs: list[TaskRef] = Field(min_length=1)


class RemovedTasks(Message):
    problems: list[str | None]  # by ref: None once removed, else why it could not be


class StopMany(Message):
    stops: list[StopTask] = Field(min_length=1)
