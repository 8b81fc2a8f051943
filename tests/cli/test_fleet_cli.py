"""`ferry fleet list` and the choice of a run's fleet, on a store of their own (no server)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from rich.console import Console

from cli.api import FerryError
from cli.fleet import fleets_json, fleets_table
from cli.fleet_api import FleetAPI, choose_fleet, list_fleets
from core.configuration import TaskConfiguration, parse_configuration
from store import FleetRecord, InstanceRecord, Store
from store.engine import make_engine, migrate
from store.fleet_repository import fleet_id, instance_id

SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    engine = make_engine(f"sqlite:///{tmp_path / 'ferry.db'}")
    migrate(engine)
    yield Store(engine)
    engine.dispose()


def fleet(store: Store, name: str, backend: str = "ssh", status: str = "active", at: float = 1.0) -> None:
    store.put_fleet(
        FleetRecord(
            id=fleet_id("p", name),
            project="p",
            name=name,
            backend=backend,
            status=status,
            workflow_id=f"ferry/p/fleet/{name}",
            created_at=at,
            updated_at=at,
        )
    )


def instance(
    name: str, fleet_name: str, blocks: int | None, busy: int, status: str = "ready"
) -> InstanceRecord:
    return InstanceRecord(
        id=instance_id("p", name),
        project="p",
        fleet=fleet_name,
        name=name,
        address="10.0.0.1",
        status=status,
        status_message="cannot connect" if status == "unreachable" else None,
        resources='{"cpu": 4.0, "memory": 15.5, "gpu": 1}',
        blocks=blocks,
        busy_blocks=busy,
        jobs=busy,
    )


HARDWARE = {
    "cpus": 4.0,
    "memory_gb": 15.5,
    "disk_gb": 100.0,
    "gpus": [{"name": "T4", "memory_gb": 16.0, "index": 0}],
    "cpu_arch": "x86",
}


def task(**fields: object) -> TaskConfiguration:
    conf = parse_configuration({"type": "task", "commands": ["x"], "resources": SMALL, **fields})
    assert isinstance(conf, TaskConfiguration)
    return conf


async def test_a_run_goes_to_its_named_fleet_else_the_newest_ssh_fleet_else_local(store: Store) -> None:
    assert await choose_fleet(store, "p", task()) == "local"
    fleet(store, "old", at=1.0)
    fleet(store, "new", at=2.0)
    fleet(store, "gone", status="deleted", at=3.0)
    fleet(store, "local", backend="local", at=4.0)
    assert await choose_fleet(store, "p", task()) == "new"
    assert await choose_fleet(store, "p", task(fleets=["gone", "old"])) == "old"
    assert await choose_fleet(store, "p", task(fleets=["local"])) == "local"
    with pytest.raises(FerryError, match="no fleet named gone in project 'p'"):
        await choose_fleet(store, "p", task(fleets=["gone"]))
    with pytest.raises(FerryError, match="none of the fleets aa, bb exists"):
        await choose_fleet(store, "p", task(fleets=["aa", "bb"]))


def test_fleet_list_shows_each_instance_with_what_is_used_and_free(store: Store) -> None:
    fleet(store, "lab")
    described = {"hardware": HARDWARE, "container_engine": "podman 4.3.1", "agent_release": "0.25.0"}
    half = instance("lab-0", "lab", 2, 1).model_copy(
        update={"in_use": '{"cpu": 2.0, "memory": 7.5, "gpu": 1}', "description": json.dumps(described)}
    )
    store.put_instances("p", "lab", [half, instance("lab-1", "lab", 2, 0, "unreachable")])
    fleet(store, "local", backend="local", at=0.5)
    store.put_instances("p", "local", [instance("local", "local", None, 0)])
    listed = list_fleets(store, "p")
    assert [f.name for f, _ in listed] == ["lab", "local"]
    data = fleets_json(listed)
    assert data[0]["instances"][0] == {
        "name": "lab-0",
        "status": "ready",
        "message": None,
        "address": "10.0.0.1",
        "resources": {"cpu": 4.0, "memory": 15.5, "gpu": 1},
        "total": {"cpu": 4.0, "memory": 15.5, "gpu": 1},
        "used": {"cpu": 2.0, "memory": 7.5, "gpu": 1},
        "free": {"cpu": 2.0, "memory": 8.0, "gpu": 0},
        "blocks": 2,
        "busy_blocks": 1,
        "free_blocks": 1,
        "jobs": 1,
        **described,
    }
    assert data[1]["instances"][0]["free_blocks"] is None
    assert data[0]["instances"][1]["container_engine"] is None  # never described: an old record, say
    out = io.StringIO()
    Console(file=out, width=200).print(fleets_table(listed))
    lines = [" ".join(line.split()) for line in out.getvalue().splitlines()]
    assert "lab-0 ready 10.0.0.1 2cpu 7.5GB 1gpu 2cpu 8GB 0gpu 1/2 1" in lines
    assert "lab-1 unreachable 10.0.0.1 0cpu 0GB 0gpu 4cpu 15.5GB 1gpu 0/2 0" in lines
    assert lines[lines.index("lab-1 unreachable 10.0.0.1 0cpu 0GB 0gpu 4cpu 15.5GB 1gpu 0/2 0") + 1] == (
        "unreachable: cannot connect"  # its reason under its row
    )
    assert "local ready 10.0.0.1 0cpu 0GB 0gpu 4cpu 15.5GB 1gpu shared 0" in lines
    wide = io.StringIO()
    Console(file=wide, width=250).print(fleets_table(listed, wide=True))
    [row] = [" ".join(line.split()) for line in wide.getvalue().splitlines() if "lab-0" in line]
    assert row.endswith("1/2 1 podman 4.3.1 0.25.0")  # -v: ENGINE and AGENT, as the agent described it
    assert " x86 4cpu 15.5GB 1gpu " in row  # -v: RESOURCES, with the CPU architecture the agent reports


def test_an_operators_fleet_list_reads_the_store_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Temporal's address, no login: the store itself, Temporal never reached (docs/teams.md#one-way-in)."""
    from typer.testing import CliRunner

    from cli.fleet import fleet_app

    monkeypatch.setenv("FERRY_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FERRY_DATABASE_URL", raising=False)
    monkeypatch.setenv("FERRY_PROJECT", "p")
    monkeypatch.setenv("FERRY_TEMPORAL_ADDRESS", "127.0.0.1:1")
    monkeypatch.delenv("FERRY_API_URL", raising=False)
    monkeypatch.delenv("FERRY_TOKEN", raising=False)
    result = CliRunner().invoke(fleet_app, ["list", "--json"])
    assert result.exit_code == 0 and result.stdout.strip() == "[]"


async def test_submissions_made_at_once_start_the_local_fleet_once(store: Store) -> None:
    """Every submission makes sure the project's local fleet runs; fifty at once from one API (a burst,
    or the gateway's requests) share one start, where each used to cost Temporal a start of its own. A
    start that failed is tried again by the next submission."""

    class Client:
        def __init__(self) -> None:
            self.starts: list[str] = []
            self.fail = True

        async def start_workflow(self, *args: Any, **kwargs: Any) -> None:
            await asyncio.sleep(0.01)
            self.starts.append(kwargs["id"])
            if self.fail:
                self.fail = False
                raise RuntimeError("Temporal is not there yet")

    client = Client()
    api = FleetAPI(cast(Any, client), store, project="p", task_queue="ferry")
    with pytest.raises(RuntimeError):
        await api.ensure_local()
    await asyncio.gather(*(api.ensure_local() for _ in range(50)))
    await api.ensure_local()
    assert client.starts == ["ferry/p/fleet/local"] * 2
    assert [f.name for f in store.list_fleets("p")] == ["local"]
