"""Named volumes in the store (docs/volumes.md): created once, attached to one job at a time, all of a
job's or none, detached idempotently, deleted only when free."""

from __future__ import annotations

import threading

import pytest

from store import Store, VolumeRecord
from store.opening import open_store
from store.volume_repository import VolumeInUse, volume_id


def volume(
    name: str, instance: str = "local", project: str = "main", configuration: str = "{}"
) -> VolumeRecord:
    return VolumeRecord(
        id=volume_id(project, name),
        project=project,
        name=name,
        fleet="local",
        instance=instance,
        configuration=configuration,
        created_at=1.0,
    )


def test_a_volume_is_created_once_and_listed_by_project(store: Store) -> None:
    first = store.create_volume(volume("data", configuration='{"a": 1}'))
    again = store.create_volume(volume("data", configuration='{"a": 2}'))
    assert again.configuration == first.configuration == '{"a": 1}'  # the first write stays
    store.create_volume(volume("cache"))
    store.create_volume(volume("data", project="other"))
    assert [v.name for v in store.list_volumes("main")] == ["cache", "data"]
    assert [v.name for v in store.list_volumes("main", ["data", "nope"])] == ["data"]
    assert store.get_volume("other", "data") is not None and store.get_volume("main", "nope") is None


def test_a_volume_is_attached_to_one_job_at_a_time(store: Store) -> None:
    store.create_volume(volume("data"))
    assert store.attach_volumes("main", ["data"], "job-a", "local", 5.0) is None
    assert store.attach_volumes("main", ["data"], "job-a", "local", 6.0) is None  # again: the same
    assert (
        store.attach_volumes("main", ["data"], "job-b", "local", 7.0)
        == "volume data is attached to job job-a"
    )
    stored = store.get_volume("main", "data")
    assert stored is not None and (stored.attached_to, stored.attached_at) == ("job-a", 6.0)
    assert store.detach_volumes("job-b") == []  # not its own: nothing changes
    assert store.detach_volumes("job-a") == ["data"]
    assert store.detach_volumes("job-a") == []
    assert store.attach_volumes("main", ["data"], "job-b", "local", 8.0) is None


def test_a_jobs_volumes_are_attached_all_or_none(store: Store) -> None:
    store.create_volume(volume("a"))
    store.create_volume(volume("b"))
    store.create_volume(volume("far", instance="lab-1"))
    assert store.attach_volumes("main", ["b"], "job-x", "local", 1.0) is None
    assert (
        store.attach_volumes("main", ["a", "b"], "job-y", "local", 2.0) == "volume b is attached to job job-x"
    )
    missing = store.attach_volumes("main", ["a", "gone"], "job-y", "local", 2.0)
    assert missing == "volume gone does not exist in project 'main' (see ferry volume list)"
    elsewhere = store.attach_volumes("main", ["a", "far"], "job-y", "local", 2.0)
    assert elsewhere == "volume far is on instance lab-1, the job was placed on local"
    a = store.get_volume("main", "a")
    assert a is not None and a.attached_to is None  # none of a refused job's volumes is taken
    assert store.attach_volumes("main", ["a", "b"], "job-y", "local", 3.0) is not None
    store.detach_volumes("job-x")
    assert store.attach_volumes("main", ["a", "b"], "job-y", "local", 3.0) is None
    assert store.detach_volumes("job-y") == ["a", "b"]


def test_a_volume_is_deleted_only_when_no_job_holds_it(store: Store) -> None:
    store.create_volume(volume("data"))
    store.attach_volumes("main", ["data"], "job-a", "local", 1.0)
    with pytest.raises(VolumeInUse, match="volume data is attached to job job-a"):
        store.delete_volume("main", "data")
    store.detach_volumes("job-a")
    deleted = store.delete_volume("main", "data")
    assert deleted is not None and deleted.name == "data"
    assert store.delete_volume("main", "data") is None and store.list_volumes("main") == []


def test_of_jobs_racing_for_one_volume_exactly_one_gets_it(db_url: str) -> None:
    """Workers of several jobs attach at once, each on its own connection: one wins, the rest are told
    who holds it."""
    stores = [open_store(db_url) for _ in range(8)]
    stores[0].create_volume(volume("data"))
    barrier = threading.Barrier(len(stores))
    answers: dict[str, str | None] = {}

    def attach(store: Store, job: str) -> None:
        barrier.wait()
        answers[job] = store.attach_volumes("main", ["data"], job, "local", 1.0)

    threads = [threading.Thread(target=attach, args=(s, f"job-{n}")) for n, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [job for job, refused in answers.items() if refused is None]
    assert len(winners) == 1 and len(answers) == len(stores)
    assert all(
        refused == f"volume data is attached to job {winners[0]}" for refused in answers.values() if refused
    )
    stored = stores[0].get_volume("main", "data")
    assert stored is not None and stored.attached_to == winners[0]
    for store in stores:
        store.engine.dispose()
