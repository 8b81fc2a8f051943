"""What the run commands read of a project's runs (docs/teams.md#runs), as a protocol: the store answers
it where Ferry's API reads it, and so does the CLI's reader of the API's answers, with the same records."""

from __future__ import annotations

from typing import Protocol

from core.configuration.pipeline import PIPELINE_TYPE
from store.models import EventRecord, JobSubmissionRecord, RunRecord


class RunReads(Protocol):
    """What the run commands read of a project's runs: the store itself (store.Store) where Ferry's API
    reads it, `cli.remote_runs.RunReader` in a command."""

    def find_run(self, project: str, run_name: str) -> RunRecord | None: ...
    def get_run(self, run_id: str) -> RunRecord | None: ...
    def list_runs(
        self, project: str | None = None, active_only: bool = False, limit: int = 100
    ) -> list[RunRecord]: ...
    def list_pipeline_tasks(self, pipeline_id: str) -> list[RunRecord]: ...
    def list_job_submissions(self, run_id: str) -> list[JobSubmissionRecord]: ...
    def read_events(
        self, run_id: str, job_submission_id: str | None, after_seq: int = -1
    ) -> list[EventRecord]: ...
    def read_all_events(self, run_id: str) -> list[EventRecord]: ...
    def read_log(self, job_submission_id: str, offset: int = 0) -> tuple[bytes, int]: ...
    def log_offset_since(self, job_submission_id: str, since: float) -> int | None: ...


def runs_with_jobs(
    reads: RunReads, project: str, *, active_only: bool, limit: int
) -> list[tuple[RunRecord, list[JobSubmissionRecord]]]:
    """`ferry ps`'s table: the project's runs, newest first, each with its jobs; a pipeline with its latest
    task's (docs/pipelines.md: its own run has none)."""
    table = []
    for run in reads.list_runs(project, active_only=active_only, limit=limit):
        tasks = reads.list_pipeline_tasks(run.id) if run.type == PIPELINE_TYPE else []
        table.append((run, reads.list_job_submissions((tasks[-1] if tasks else run).id)))
    return table
