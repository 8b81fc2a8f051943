"""Deleting a finished run (`ferry delete`): every row it left goes, in one transaction; an active run,
or a pipeline with an active task, keeps everything; a code archive another run uses stays."""

import pytest

from core.status import RunStatus
from store.models import RUN_EVENTLOG, ServiceReplicaRecord
from store.repository import Store
from store.run_deletion import DeletedRun, RunStillActive
from tests.store.test_store_repository import _job, _run

CODE = b"the run's code"


def _finished_run_with_everything(store: Store, run_id: str, name: str = "train") -> str:
    """A finished service run with a job, events, a log, a replica row, a drain and request counts."""
    code_hash = store.put_code(CODE)
    store.put_run(_run(run_id, name=name, status=RunStatus.DONE).model_copy(update={"code_hash": code_hash}))
    job = _job(run_id)
    store.put_job_submission(job)
    store.append_events(run_id, RUN_EVENTLOG, 0, [(1.0, "submitted", {})])
    store.append_events(run_id, job.id, 0, [(1.0, "job submitted", {})])
    store.append_log(job.id, 0, b"hello\n", 1.0)
    store.register_replica(
        ServiceReplicaRecord(
            id=job.id, run_id=run_id, replica_num=0, submission_num=0, url="http://x", state="ready"
        )
    )
    store.mark_drained(job.id, "gateway-1")
    store.add_requests("gateway-1", {(run_id, 100): 3})
    return job.id


def test_a_finished_run_goes_with_everything_it_left(store: Store) -> None:
    job_id = _finished_run_with_everything(store, "run-1")
    kept_job = _finished_run_with_everything(store, "run-2", name="other")

    assert store.delete_run("run-1") == DeletedRun(["run-1"], [job_id])

    assert store.get_run("run-1") is None
    assert store.list_job_submissions("run-1") == []
    assert store.read_all_events("run-1") == []
    assert store.log_size(job_id) == 0
    assert store.drained_by(job_id) == set()
    assert store.get_replica(job_id) is None
    assert store.request_count("run-1", 0) == 0
    # The other run keeps its rows, and the code archive they shared.
    assert [job.id for job in store.list_job_submissions("run-2")] == [kept_job]
    assert store.log_size(kept_job) == len(b"hello\n")
    assert store.request_count("run-2", 0) == 3
    assert store.get_replica(kept_job) is not None
    assert store.get_code(store.put_code(CODE)) == CODE


def test_the_last_run_of_a_code_archive_takes_it_along(store: Store) -> None:
    _finished_run_with_everything(store, "run-1")
    code_hash = store.put_code(CODE)
    store.delete_run("run-1")
    assert store.get_code(code_hash) is None


def test_an_active_run_keeps_everything(store: Store) -> None:
    store.put_run(_run("run-1", status=RunStatus.RUNNING))
    store.put_job_submission(_job("run-1"))
    with pytest.raises(RunStillActive, match="run-1"):
        store.delete_run("run-1")
    assert store.get_run("run-1") is not None
    assert len(store.list_job_submissions("run-1")) == 1


def test_a_pipeline_goes_with_its_tasks_and_stays_while_one_is_active(store: Store) -> None:
    store.put_run(_run("pipe-1", name="pipe", status=RunStatus.DONE))
    for task, status in ((1, RunStatus.DONE), (2, RunStatus.RUNNING)):
        task_id = f"pipe-1-t{task}"
        store.put_run(
            _run(task_id, name=f"pipe-t{task}", status=status).model_copy(update={"pipeline_id": "pipe-1"})
        )
        store.put_job_submission(_job(task_id))
    with pytest.raises(RunStillActive, match="pipe-1-t2"):
        store.delete_run("pipe-1")
    store.update_run("pipe-1-t2", status=RunStatus.FAILED)

    deleted = store.delete_run("pipe-1")

    assert deleted == DeletedRun(
        ["pipe-1", "pipe-1-t1", "pipe-1-t2"], ["pipe-1-t1/r0/j0/s0", "pipe-1-t2/r0/j0/s0"]
    )
    assert [store.get_run(run_id) for run_id in deleted.run_ids] == [None, None, None]


def test_an_unknown_run_is_none(store: Store) -> None:
    assert store.delete_run("nope") is None
