"""A run workflow's writes through `record_run` keep their order in the store (docs/runs.md#the-store):
a write that ends after a later one, with an earlier place, changes nothing."""

from activities.records import store_run_changes
from core.eventlog import Event
from core.status import RunStatus, RunTerminationReason
from core.wire.messages import RecordRun
from store.repository import Store
from tests.store.test_store_repository import _run, _stored_run


def _record(status: RunStatus, events: list[str], order: int | None) -> RecordRun:
    return RecordRun(
        run_id="r1",
        status=status,
        termination_reason=RunTerminationReason.ALL_JOBS_DONE if status.is_finished() else None,
        start_seq=0,
        events=[Event(timestamp=1.0, name=name) for name in events],
        order=order,
    )


def test_a_run_write_arriving_after_a_later_one_changes_nothing(store: Store) -> None:
    store.put_run(_run("r1"))
    running = _record(RunStatus.RUNNING, ["submit", "status"], order=1_000_013_001)
    done = _record(RunStatus.DONE, ["submit", "status", "job-finish", "status", "clean"], order=1_000_019_001)
    store_run_changes(store, done)
    store_run_changes(store, running)  # the earlier write, heard to end after the later one
    stored = _stored_run(store, "r1")
    assert (stored.status, stored.write_order) == (RunStatus.DONE, 1_000_019_001)
    assert [e.name for e in store.read_events("r1", None)] == [
        "submit",
        "status",
        "job-finish",
        "status",
        "clean",
    ]


def test_a_run_of_an_earlier_revision_writes_with_no_order(store: Store) -> None:
    store.put_run(_run("r1"))
    store_run_changes(store, _record(RunStatus.RUNNING, ["submit", "status"], order=None))
    store_run_changes(store, _record(RunStatus.DONE, ["submit", "status", "status"], order=None))
    stored = _stored_run(store, "r1")
    assert (stored.status, stored.write_order) == (RunStatus.DONE, None)
