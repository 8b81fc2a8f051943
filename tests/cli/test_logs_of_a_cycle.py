"""`ferry logs` of a scheduled run shows one cycle's job submissions (docs/schedules.md): the latest by
default, `--cycle N` an earlier one; any other run shows every submission, and refuses `--cycle`."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.errors import CommandError
from cli.follow import LogStream
from cli.logs import cycle_jobs
from store import JobSubmissionRecord, RunRecord, Store
from store.engine import make_engine, migrate


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    engine = make_engine(f"sqlite:///{tmp_path / 'ferry.db'}")
    migrate(engine)
    yield Store(engine)
    engine.dispose()


def _run(store: Store, schedule: bool) -> RunRecord:
    configuration = (
        '{"type": "task", "commands": ["true"], "schedule": {"cron": ["0 2 * * *"]}}'
        if schedule
        else '{"type": "task", "commands": ["true"]}'
    )
    record = RunRecord(
        id="nightly-1",
        project="main",
        run_name="nightly",
        user="u",
        type="task",
        status="pending",
        configuration=configuration,
        workflow_id="ferry/main/nightly",
    )
    store.put_run(record)
    submit: dict[str, Any] = {"run_name": "nightly", "project": "main", "user": "u", "type": "task"}
    events: list[tuple[float, str, dict[str, Any]]] = [(1.0, "submit", submit)]
    for cycle in (1, 2):
        events.append((cycle * 10.0, "cycle", {"cycle": cycle, "workflow_id": "w", "scheduled_at": 0.0}))
        events.append((cycle * 10.0, "job-submit", {"replica": 0, "job": 0, "submission": cycle - 1}))
        job = JobSubmissionRecord(
            id=f"nightly-1-r0-j0-s{cycle - 1}", run_id="nightly-1", submission_num=cycle - 1, status="done"
        )
        store.put_job_submission(job)
        store.append_log(job.id, 0, f"cycle {cycle}\n".encode(), cycle * 10.0)
    store.append_events("nightly-1", None, 0, events)
    return record


def _logs(store: Store, run: RunRecord, cycle: int | None) -> bytes:
    out = io.BytesIO()
    stream = LogStream(store, run, out, submissions=cycle_jobs(store, run, cycle))
    stream.poll(store.list_job_submissions(run.id))
    return out.getvalue()


def test_a_scheduled_runs_logs_are_one_cycles(store: Store) -> None:
    run = _run(store, schedule=True)
    assert _logs(store, run, None) == b"cycle 2\n"
    assert _logs(store, run, 1) == b"cycle 1\n"
    with pytest.raises(CommandError, match="has had cycles 1 to 2"):
        cycle_jobs(store, run, 3)


def test_any_other_runs_logs_are_every_submissions(store: Store) -> None:
    run = _run(store, schedule=False)
    assert _logs(store, run, None) == b"cycle 1\ncycle 2\n"
    with pytest.raises(CommandError, match="not a scheduled run"):
        cycle_jobs(store, run, 1)
