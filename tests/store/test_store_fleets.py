"""Fleet and instance records: idempotent writes, a fleet's instances replaced as a whole, lookups by name."""

from __future__ import annotations

import pytest

from store import FleetRecord, InstanceRecord, RecordNotFoundError, Store
from store.fleet_repository import fleet_id, instance_id


def fleet(name: str, project: str = "p", status: str = "active", created_at: float = 1.0) -> FleetRecord:
    return FleetRecord(
        id=fleet_id(project, name),
        project=project,
        name=name,
        backend="ssh",
        configuration='{"type": "fleet"}',
        status=status,
        workflow_id=f"ferry/{project}/fleet/{name}",
        created_at=created_at,
        updated_at=created_at,
    )


def instance(name: str, fleet_name: str = "lab", project: str = "p", busy: int = 0) -> InstanceRecord:
    return InstanceRecord(
        id=instance_id(project, name),
        project=project,
        fleet=fleet_name,
        name=name,
        address="10.0.0.1",
        status="ready",
        resources='{"cpu": 4.0, "memory": 16.0, "gpu": 0}',
        blocks=2,
        busy_blocks=busy,
        jobs=busy,
    )


def test_fleets_are_upserted_listed_newest_first_and_updated(store: Store) -> None:
    store.put_fleet(fleet("old", created_at=1.0))
    store.put_fleet(fleet("new", created_at=2.0))
    store.put_fleet(fleet("new", created_at=2.0))  # again: no duplicate
    store.put_fleet(fleet("gone", status="deleted", created_at=3.0))
    store.put_fleet(fleet("elsewhere", project="q"))
    assert [f.name for f in store.list_fleets("p")] == ["new", "old"]
    assert [f.name for f in store.list_fleets("p", include_deleted=True)] == ["gone", "new", "old"]
    store.update_fleet("p", "old", status="deleting")
    found = store.get_fleet("p", "old")
    assert (
        found is not None and found.status == "deleting" and found.configuration_data() == {"type": "fleet"}
    )
    assert store.get_fleet("q", "old") is None
    with pytest.raises(RecordNotFoundError):
        store.update_fleet("p", "missing", status="deleted")


def test_a_fleets_instances_are_replaced_as_a_whole(store: Store) -> None:
    store.put_instances("p", "lab", [instance("lab-0"), instance("lab-1", busy=1)])
    store.put_instances("p", "lab", [instance("lab-1", busy=2)])  # lab-0 is gone from the fleet
    store.put_instances("p", "other", [instance("other-0", fleet_name="other")])
    listed = store.list_instances("p", "lab")
    assert [(i.name, i.busy_blocks) for i in listed] == [("lab-1", 2)]
    assert listed[0].resources_data() == {"cpu": 4.0, "memory": 16.0, "gpu": 0}
    everything = store.list_instances("p", include_deleted=True)
    assert [(i.name, i.status) for i in everything] == [
        ("lab-0", "deleted"),
        ("lab-1", "ready"),
        ("other-0", "ready"),
    ]
    found = store.find_instance("lab-1")
    assert found is not None and (found.project, found.fleet) == ("p", "lab")
    assert store.find_instance("lab-0") is None
    store.put_instances("p", "lab", [])
    assert store.list_instances("p", "lab") == [] and store.find_instance("lab-1") is None
