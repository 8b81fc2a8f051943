"""A pipeline's tasks as the CLI names them (docs/pipelines.md): `--task N` (1-based, as `ferry ps` says
"task N of M") picks the run of that task; without it, the latest task started."""

from __future__ import annotations

from cli.errors import FerryError
from core.configuration.pipeline import PIPELINE_TYPE, PipelineConfiguration
from store import JobSubmissionRecord, RunRecord
from store.run_reads import RunReads


def task_run(store: RunReads, record: RunRecord, task: int | None) -> RunRecord:
    """The run of a pipeline's task `task` (None: the latest started); the record itself for any other run,
    which has no tasks (FerryError if a task is asked of it)."""
    if record.type != PIPELINE_TYPE:
        if task is not None:
            raise FerryError(f"run {record.run_name} is a {record.type}, not a pipeline: it has no tasks")
        return record
    tasks = store.list_pipeline_tasks(record.id)
    if task is None:
        return tasks[-1] if tasks else record
    found = next((t for t in tasks if t.task_num == task), None)
    if found is None:
        count = len(PipelineConfiguration.model_validate_json(record.configuration).tasks)
        what = "has not started yet" if 1 <= task <= count else f"is not one of its {count} tasks"
        raise FerryError(f"run {record.run_name}: task {task} {what}")
    return found


def run_jobs(store: RunReads, record: RunRecord) -> list[JobSubmissionRecord]:
    """A run's job submissions; a pipeline's are its tasks', task after task (its own run has none)."""
    if record.type != PIPELINE_TYPE:
        return store.list_job_submissions(record.id)
    tasks = store.list_pipeline_tasks(record.id)
    return [job for task in tasks for job in store.list_job_submissions(task.id)]
