"""The Store's reads and writes, and the idempotency of every write."""

import hashlib

import pytest

from core.configuration import TaskConfiguration
from core.status import JobStatus, RunStatus
from core.wire.workflow_ids import job_submission_id, parse_job_submission_id
from store.models import RUN_EVENTLOG, JobSubmissionRecord, RunRecord
from store.repository import LogGapError, RecordNotFoundError, Store
from store.repository import code_hash as code_hash_of


def _run(
    run_id: str,
    *,
    project: str = "main",
    name: str = "train",
    status: str = RunStatus.SUBMITTED,
    submitted_at: float = 100.0,
) -> RunRecord:
    return RunRecord(
        id=run_id,
        project=project,
        run_name=name,
        user="alice",
        type="task",
        status=status,
        configuration='{"type": "task", "commands": ["python train.py"]}',
        submitted_at=submitted_at,
        updated_at=submitted_at,
        workflow_id=f"ferry/{project}/{name}",
    )


def _job(run_id: str, replica: int = 0, job: int = 0, submission: int = 0) -> JobSubmissionRecord:
    return JobSubmissionRecord(
        id=f"{run_id}/r{replica}/j{job}/s{submission}",
        run_id=run_id,
        replica_num=replica,
        job_num=job,
        submission_num=submission,
        status=JobStatus.SUBMITTED,
    )


def _stored_run(store: Store, run_id: str) -> RunRecord:
    record = store.get_run(run_id)
    assert record is not None
    return record


def _stored_job(store: Store, job_submission_id: str) -> JobSubmissionRecord:
    record = store.get_job_submission(job_submission_id)
    assert record is not None
    return record


# Runs


def test_put_get_and_replace_a_run(store: Store) -> None:
    store.put_run(_run("r1"))
    stored = store.get_run("r1")
    assert stored is not None
    assert (stored.run_name, stored.status, stored.priority) == ("train", "submitted", 0)
    assert stored.configuration_data() == {"type": "task", "commands": ["python train.py"]}
    replaced = _run("r1", status=RunStatus.RUNNING)
    store.put_run(replaced)
    store.put_run(replaced)
    stored = store.get_run("r1")
    assert stored is not None and stored.status == "running"
    assert store.get_run("missing") is None


def test_a_runs_stored_configuration_read_back_typed(store: Store) -> None:
    store.put_run(_run("r1"))
    stored = store.get_run("r1")
    assert stored is not None
    configuration = stored.run_configuration()
    assert isinstance(configuration, TaskConfiguration)
    assert configuration.commands == ["python train.py"] and configuration.stop_duration == 300
    pipeline = _run("p1")
    pipeline.type, pipeline.configuration = "pipeline", '{"tasks": []}'
    assert pipeline.run_configuration() is None  # its tasks are runs of their own
    broken = _run("b1")
    broken.configuration = '{"type": "task"}'
    with pytest.raises(ValueError):
        broken.run_configuration()


def test_update_run(store: Store) -> None:
    store.put_run(_run("r1"))
    store.update_run("r1", status=RunStatus.DONE, termination_reason="all_jobs_done", finished_at=150.0)
    store.update_run("r1", status=RunStatus.DONE, termination_reason="all_jobs_done", finished_at=150.0)
    stored = _stored_run(store, "r1")
    assert (stored.status, stored.termination_reason, stored.finished_at) == ("done", "all_jobs_done", 150.0)
    assert stored.updated_at > 100.0  # set by the update
    store.update_run("r1", updated_at=120.0)
    assert _stored_run(store, "r1").updated_at == 120.0
    with pytest.raises(RecordNotFoundError):
        store.update_run("missing", status=RunStatus.DONE)
    with pytest.raises(TypeError):
        store.update_run("r1", colour="blue")
    with pytest.raises(TypeError):
        store.update_run("r1", id="r2")


def test_find_run_returns_the_latest_of_a_reused_name(store: Store) -> None:
    store.put_run(_run("old", status=RunStatus.DONE, submitted_at=100.0))
    store.put_run(_run("new", submitted_at=200.0))
    store.put_run(_run("other-project", project="research", submitted_at=300.0))
    found = store.find_run("main", "train")
    assert found is not None and found.id == "new"
    assert store.find_run("main", "nope") is None


def test_list_runs_filters(store: Store) -> None:
    store.put_run(_run("a", name="a", status=RunStatus.DONE, submitted_at=1.0))
    store.put_run(_run("b", name="b", status=RunStatus.RUNNING, submitted_at=2.0))
    store.put_run(_run("c", name="c", status=RunStatus.FAILED, submitted_at=3.0))
    store.put_run(_run("d", name="d", status=RunStatus.PENDING, submitted_at=4.0, project="research"))
    store.put_run(_run("e", name="e", status=RunStatus.TERMINATED, submitted_at=5.0, project="research"))
    assert [run.id for run in store.list_runs()] == ["e", "d", "c", "b", "a"]
    assert [run.id for run in store.list_runs(project="main")] == ["c", "b", "a"]
    assert [run.id for run in store.list_runs(active_only=True)] == ["d", "b"]
    assert [run.id for run in store.list_runs(project="research", active_only=True)] == ["d"]
    assert [run.id for run in store.list_runs(limit=2)] == ["e", "d"]
    assert store.list_runs(project="nobody") == []


# Job submissions


def test_job_submissions(store: Store) -> None:
    for replica, job, submission in [(1, 0, 0), (0, 1, 0), (0, 0, 1), (0, 0, 0)]:
        store.put_job_submission(_job("r1", replica, job, submission))
    store.put_job_submission(_job("r1", 0, 0, 0))
    store.put_job_submission(_job("r2"))
    assert [job.id for job in store.list_job_submissions("r1")] == [
        "r1/r0/j0/s0",
        "r1/r0/j0/s1",
        "r1/r0/j1/s0",
        "r1/r1/j0/s0",
    ]
    store.update_job_submission("r1/r0/j0/s0", status=JobStatus.DONE, exit_status=0, finished_at=9.0)
    stored = store.get_job_submission("r1/r0/j0/s0")
    assert stored is not None and (stored.status, stored.exit_status) == ("done", 0)
    with pytest.raises(RecordNotFoundError):
        store.update_job_submission("r9/r0/j0/s0", status=JobStatus.DONE)
    with pytest.raises(TypeError):
        store.update_job_submission("r1/r0/j0/s0", log_size=5)


def test_log_size_of_a_submission_follows_its_log(store: Store) -> None:
    job = _job("r1")
    store.append_log(job.id, 0, b"before the record\n", 1.0)  # the log may arrive first
    store.put_job_submission(job)
    assert _stored_job(store, job.id).log_size == 18
    store.append_log(job.id, 18, b"after\n", 2.0)
    assert _stored_job(store, job.id).log_size == 24
    store.put_job_submission(job)  # a stale copy, log_size=0, changes nothing of the log's
    assert _stored_job(store, job.id).log_size == 24


def test_many_submissions_recorded_at_once_keep_their_logs_sizes(store: Store) -> None:
    """An array's news: many submissions in one transaction, one of them twice (the last copy wins), their
    log sizes the store's own whether the log came first, later, or not at all."""
    store.put_run(_run("r1"))
    early, late, silent = _job("r1", replica=0), _job("r1", replica=1), _job("r1", replica=2)
    store.append_log(early.id, 0, b"before the record\n", 1.0)
    store.append_log(early.id, 18, b"more\n", 1.5)
    store.record_changes("r1", {}, (0, []), [(early, 0, []), (late, 0, []), (silent, 0, [])])
    store.append_log(late.id, 0, b"after\n", 2.0)
    running, done = late.model_copy(), late.model_copy()
    running.status, done.status = JobStatus.RUNNING, JobStatus.DONE
    events = [(3.0, "state", {"status": "running"})]
    store.record_changes(
        "r1", {"status": RunStatus.RUNNING}, (0, []), [(running, 0, events), (early, 0, []), (done, 1, [])]
    )
    stored = {job.id: _stored_job(store, job.id) for job in (early, late, silent)}
    assert {job_id: record.log_size for job_id, record in stored.items()} == {
        early.id: 23,
        late.id: 6,
        silent.id: 0,
    }
    assert stored[late.id].status == JobStatus.DONE
    assert _stored_run(store, "r1").status == RunStatus.RUNNING
    assert [event.name for event in store.read_events("r1", late.id)] == ["state"]


def test_a_run_workflows_writes_in_their_order(store: Store) -> None:
    """docs/runs.md#the-store: a write from a workflow task the server refused (a lower order) and the
    write of that task redone (a higher one, with other events from the same seq on); the redone write
    replaces the run's events from its first seq on, and the refused one arriving late changes nothing.
    A retried write (the same order) adds nothing twice; a write of no order is the regular activity's."""
    store.put_run(_run("r1"))
    first = [(1.0, "submit", {}), (1.0, "status", {"status": "running"})]
    store.record_changes("r1", {"status": RunStatus.RUNNING}, (0, first), order=17)
    refused = [(2.0, "job-status", {"status": "running"}), (2.0, "job-serving", {"state": "ready"})]
    store.record_changes("r1", {"status": RunStatus.RUNNING}, (2, refused), order=31)
    redone = [(3.0, "job-finish", {"status": "failed"}), (3.0, "status", {"status": "failed"})]
    redone.append((3.0, "clean", {}))
    store.record_changes("r1", {"status": RunStatus.FAILED}, (2, redone), order=35)
    store.record_changes("r1", {"status": RunStatus.FAILED}, (2, redone[:2]), order=35)  # its retry
    store.record_changes("r1", {"status": RunStatus.RUNNING}, (2, refused), order=31)  # arriving late
    stored = store.read_events("r1", None)
    assert [(e.seq, e.timestamp, e.name) for e in stored] == [
        (0, 1.0, "submit"),
        (1, 1.0, "status"),
        (2, 3.0, "job-finish"),
        (3, 3.0, "status"),
        (4, 3.0, "clean"),
    ]
    assert _stored_run(store, "r1").status == RunStatus.FAILED
    # The next execution of the run (continued as new) writes after all of them, from a shorter history.
    store.record_changes("r1", {}, (5, [(4.0, "retry", {})]), order=1_000_004)
    store.record_changes("r1", {}, (6, [(5.0, "submit", {})]))  # a regular activity's: no order
    assert [e.name for e in store.read_events("r1", None, after_seq=4)] == ["retry", "submit"]


# Eventlogs


def test_events_sent_twice_are_stored_once(store: Store) -> None:
    events: list[tuple[float, str, dict[str, object]]] = [
        (1.0, "submit", {"priority": 0}),
        (2.0, "alloc", {"instance": "i-1"}),
    ]
    store.append_events("r1", "r1/r0/j0/s0", 0, events)
    store.append_events("r1", "r1/r0/j0/s0", 0, events)
    stored = store.read_events("r1", "r1/r0/j0/s0")
    assert [(e.seq, e.timestamp, e.name, e.context_data()) for e in stored] == [
        (0, 1.0, "submit", {"priority": 0}),
        (1, 2.0, "alloc", {"instance": "i-1"}),
    ]


def test_a_retry_overlapping_stored_events_adds_only_the_new_ones(store: Store) -> None:
    store.append_events("r1", None, 0, [(1.0, "submit", {}), (2.0, "validate", {})])
    # The retry resends from seq 1, with a differing copy of it: the first write wins.
    store.append_events("r1", None, 1, [(2.5, "validate", {"late": True}), (3.0, "depend", {})])
    stored = store.read_events("r1", None)
    assert [(e.seq, e.name, e.timestamp) for e in stored] == [
        (0, "submit", 1.0),
        (1, "validate", 2.0),
        (2, "depend", 3.0),
    ]
    assert [e.seq for e in store.read_events("r1", None, after_seq=0)] == [1, 2]
    assert store.read_events("r1", None, after_seq=2) == []
    store.append_events("r1", None, 3, [])


def test_run_and_job_eventlogs_are_separate(store: Store) -> None:
    store.append_events("r1", None, 0, [(1.0, "submit", {}), (4.0, "memo", {"note": "x"})])
    store.append_events("r1", "r1/r0/j0/s0", 0, [(2.0, "submit", {}), (4.0, "start", {})])
    store.append_events("r1", "r1/r0/j1/s0", 0, [(3.0, "submit", {})])
    store.append_events("r2", None, 0, [(0.5, "submit", {})])
    assert [e.name for e in store.read_events("r1", None)] == ["submit", "memo"]
    assert [e.id for e in store.read_events("r1", RUN_EVENTLOG)] == [
        e.id for e in store.read_events("r1", None)
    ]
    assert {e.job_submission_id for e in store.read_events("r1", None)} == {RUN_EVENTLOG}
    assert [e.name for e in store.read_events("r1", "r1/r0/j0/s0")] == ["submit", "start"]
    assert [(e.timestamp, e.job_submission_id, e.name) for e in store.read_all_events("r1")] == [
        (1.0, "", "submit"),
        (2.0, "r1/r0/j0/s0", "submit"),
        (3.0, "r1/r0/j1/s0", "submit"),
        (4.0, "", "memo"),  # same time, same seq: the run's own eventlog sorts first
        (4.0, "r1/r0/j0/s0", "start"),
    ]


# Logs


def test_a_resent_chunk_is_ignored(store: Store) -> None:
    assert store.append_log("j", 0, b"hello ", 1.0) == 6
    assert store.append_log("j", 6, b"world\n", 2.0) == 12
    assert store.append_log("j", 0, b"hello ", 1.0) == 12
    assert store.append_log("j", 6, b"world\n", 2.0) == 12
    assert store.read_log("j") == (b"hello world\n", 12)
    assert store.log_size("j") == 12


def test_an_overlapping_chunk_adds_only_its_new_bytes(store: Store) -> None:
    store.append_log("j", 0, b"abcdef", 1.0)
    # A resend from inside the first chunk that runs past its end (the watcher re-read more).
    assert store.append_log("j", 3, b"defghi", 2.0) == 9
    assert store.append_log("j", 0, b"abcdefghijk", 3.0) == 11
    assert store.read_log("j") == (b"abcdefghijk", 11)


def test_a_gap_raises_with_the_stored_size(store: Store) -> None:
    store.append_log("j", 0, b"0123", 1.0)
    with pytest.raises(LogGapError) as raised:
        store.append_log("j", 5, b"56", 2.0)
    assert raised.value.size == 4 and raised.value.offset == 5
    with pytest.raises(LogGapError):
        store.append_log("fresh", 1, b"x", 1.0)
    assert store.read_log("j") == (b"0123", 4)
    with pytest.raises(ValueError):
        store.append_log("j", -1, b"x", 1.0)


def test_empty_chunks_and_empty_logs(store: Store) -> None:
    assert store.append_log("j", 0, b"", 1.0) == 0
    assert store.read_log("j") == (b"", 0)
    assert store.read_log("j", 7) == (b"", 7)
    assert store.log_size("j") == 0


def test_read_log_from_any_offset_with_any_limit(store: Store) -> None:
    pieces = [b"a", b"bcd", b"efghij", b"k", b"lmnopq"]
    offset = 0
    for piece in pieces:
        store.append_log("j", offset, piece, 1.0)
        offset += len(piece)
    whole = b"".join(pieces)
    for start in range(len(whole) + 2):
        assert store.read_log("j", start) == (whole[start:], start + len(whole[start:]))
        for limit in range(len(whole) + 2):
            expected = whole[start : start + limit]
            assert store.read_log("j", start, limit) == (expected, start + len(expected)), (start, limit)
    with pytest.raises(ValueError):
        store.read_log("j", -1)
    with pytest.raises(ValueError):
        store.read_log("j", 0, -1)


def test_a_thousand_small_chunks_read_back_whole(store: Store) -> None:
    lines = [f"line {i}\n".encode() for i in range(1000)]
    size = 0
    for i, line in enumerate(lines):
        size = store.append_log("j", size, line, float(i))
    whole = b"".join(lines)
    assert size == len(whole) == store.log_size("j")
    assert store.read_log("j") == (whole, len(whole))
    # Followed in pages, as `ferry logs -f` would.
    paged, offset = b"", 0
    while offset < size:
        data, offset = store.read_log("j", offset, limit=1000)
        paged += data
    assert paged == whole


# Code archives


def test_code_archives_are_content_addressed(store: Store) -> None:
    archive = bytes(range(256)) * 1000
    code_hash = store.put_code(archive)
    assert code_hash == "sha256:" + hashlib.sha256(archive).hexdigest()
    assert store.put_code(archive) == code_hash
    assert store.get_code(code_hash) == archive
    assert store.put_code(b"") == "sha256:" + hashlib.sha256(b"").hexdigest()
    assert store.get_code("sha256:" + "0" * 64) is None
    # What the API asks before a submission, without reading the archive (docs/teams.md#runs).
    assert store.has_code(code_hash) and not store.has_code("sha256:" + "0" * 64)
    assert code_hash_of(archive) == code_hash


def test_databases_without_on_conflict_stay_idempotent(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # Databases other than SQLite and PostgreSQL take the portable path; run it here on SQLite.
    monkeypatch.setattr("store.sql.dialect_insert", lambda connection, table: None)
    store.put_run(_run("r1"))
    store.put_run(_run("r1", status=RunStatus.RUNNING))
    assert _stored_run(store, "r1").status == "running"
    store.put_job_submission(_job("r1"))
    store.put_job_submission(_job("r1"))
    assert len(store.list_job_submissions("r1")) == 1
    store.append_events("r1", None, 0, [(1.0, "submit", {}), (2.0, "validate", {})])
    store.append_events("r1", None, 1, [(2.0, "validate", {}), (3.0, "depend", {})])
    assert [e.seq for e in store.read_events("r1", None)] == [0, 1, 2]
    assert store.put_code(b"code") == store.put_code(b"code")
    assert store.get_code(store.put_code(b"code")) == b"code"


# Fleets' queues


def test_a_submitted_job_its_fleet_queues_waits_for_capacity_until_the_queue_is_written_without_it(
    store: Store,
) -> None:
    store.put_run(_run("r1"))
    # Ids as the workflows make them: a fleet's queue names its jobs by them.
    first, second, running = (
        _job("r1", job=n).model_copy(update={"id": job_submission_id("r1", 0, n, 0)}) for n in range(3)
    )
    unrecorded = job_submission_id("r1", 0, 3, 0)  # its run has not written it yet
    for job in (first, second, running.model_copy(update={"status": JobStatus.RUNNING})):
        store.put_job_submission(job)
    store.put_queue("main", "lab", [second.id, first.id, running.id, unrecorded, "not-a-job"])
    store.put_queue("main", "other", [])  # another fleet's write leaves this one's queue as it is

    def shown() -> list[tuple[int, str, str | None]]:
        return [(j.job_num, j.status, j.status_message) for j in store.list_job_submissions("r1")]

    waiting = "waiting for capacity"
    # A running job in a stale queue record says nothing of it; one not recorded yet is shown, waiting.
    assert shown() == [
        (0, "submitted", waiting),
        (1, "submitted", waiting),
        (2, "running", None),
        (3, "submitted", waiting),
    ]
    assert [(r.job_submission_id, r.position) for r in store.queued_jobs("r1")] == [
        (second.id, 1),
        (first.id, 2),
        (running.id, 3),
        (unrecorded, 4),
    ]
    store.put_queue("main", "lab", [second.id])
    assert shown() == [(0, "submitted", None), (1, "submitted", waiting), (2, "running", None)]
    # A message of the job's own is kept; the record itself is never changed by a read.
    store.update_job_submission(second.id, status_message="retrying")
    assert shown()[1] == (1, "submitted", "retrying")
    assert _stored_job(store, first.id).status_message is None
    store.put_queue("main", "lab", [first.id])
    store.update_run("r1", status=RunStatus.TERMINATED)  # only a finished run is deleted
    assert store.delete_run("r1") is not None
    assert store.queued_jobs("r1") == []


def test_job_submission_ids_parse_back_and_nothing_else_does() -> None:
    assert parse_job_submission_id(job_submission_id("my-run-1a2b", 2, 10, 3)) == ("my-run-1a2b", 2, 10, 3)
    for other in (
        "",
        "r0-j0-s0",
        "run-r0-s0",
        "run-x0-j0-s0",
        "run-r0-j0-s",
        "run-r0-j0-s1a",
        "run-r0-j٣-s0",
    ):
        assert parse_job_submission_id(other) is None, other
