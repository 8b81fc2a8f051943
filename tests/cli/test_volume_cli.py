"""`ferry volume create|list|delete`, `ferry apply -f volume.yml`, and where a run naming volumes goes, as an
operator's CLI (Temporal's address, no login: the store itself, docs/teams.md#one-way-in). docs/volumes.md;
tests/api/test_cli_volumes.py runs them through the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cli.errors import FerryError
from cli.main import app
from cli.volume_api import run_volumes
from core.configuration import TaskConfiguration, parse_configuration
from store import FleetRecord, Store
from store.fleet_repository import fleet_id

SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}
runner = CliRunner()


def ferry(home: Path, *args: str) -> Result:
    env = {
        "FERRY_HOME": str(home),
        "FERRY_DATABASE_URL": f"sqlite:///{home / 'ferry.db'}",
        "FERRY_PROJECT": "p",
        "FERRY_TEMPORAL_ADDRESS": "127.0.0.1:1",  # an operator's: never reached by these commands
        "FERRY_API_URL": "",
        "FERRY_TOKEN": "",
    }
    return runner.invoke(app, list(args), env=env)


def ssh_fleet(store: Store, name: str, hosts: int, status: str = "active") -> None:
    configuration = {
        "type": "fleet",
        "name": name,
        "ssh_config": {"user": "root", "hosts": [f"h{n}.example" for n in range(hosts)]},
    }
    store.put_fleet(
        FleetRecord(
            id=fleet_id("p", name),
            project="p",
            name=name,
            backend="ssh",
            configuration=parse_configuration(configuration).model_dump_json(),
            status=status,
            workflow_id=f"ferry/p/fleet/{name}",
        )
    )


def listed(home: Path) -> list[dict[str, object]]:
    result = ferry(home, "volume", "list", "--json")
    assert result.exit_code == 0, result.output
    return [{k: v for k, v in item.items() if k != "created_at"} for item in json.loads(result.stdout)]


def test_create_list_and_delete_on_this_machine(home: Path, store: Store) -> None:
    created = ferry(home, "volume", "create", "data")
    assert (created.exit_code, created.output) == (0, "volume data created (fleet local, instance local)\n")
    again = ferry(home, "volume", "create", "data")
    assert (again.exit_code, again.output) == (0, "volume data unchanged (fleet local, instance local)\n")
    assert listed(home) == [{"name": "data", "fleet": "local", "instance": "local", "attached_to": None}]
    table = ferry(home, "volume", "list")
    assert table.stdout.split("\n")[0].split() == ["NAME", "FLEET", "INSTANCE", "ATTACHED", "TO", "CREATED"]
    deleted = ferry(home, "volume", "delete", "data", "-y")
    assert (deleted.exit_code, deleted.output) == (
        0,
        "volume data deleted (its directory stays on instance local)\n",
    )
    assert listed(home) == []
    gone = ferry(home, "volume", "delete", "data", "-y")
    assert (gone.exit_code, gone.output) == (
        3,
        "ferry volume delete: no volume named data in project 'p' (see ferry volume list)\n",
    )


def test_a_volume_in_use_is_not_deleted(home: Path, store: Store) -> None:
    assert ferry(home, "volume", "create", "data").exit_code == 0
    assert store.attach_volumes("p", ["data"], "train-1-r0-j0-s0", "local", 1.0) is None
    assert listed(home)[0]["attached_to"] == "train-1-r0-j0-s0"
    refused = ferry(home, "volume", "delete", "data", "-y")
    assert (refused.exit_code, refused.output) == (
        2,
        "ferry volume delete: volume data is attached to job train-1-r0-j0-s0: stop its run first\n",
    )


def test_a_volume_on_an_ssh_fleet_goes_to_the_named_or_the_first_instance(home: Path, store: Store) -> None:
    ssh_fleet(store, "lab", hosts=2)
    assert (
        ferry(home, "volume", "create", "first").output
        == "volume first created (fleet lab, instance lab-0)\n"
    )
    second = ferry(home, "volume", "create", "second", "--fleet", "lab", "--instance", "lab-1")
    assert second.output == "volume second created (fleet lab, instance lab-1)\n"
    on_local = ferry(home, "volume", "create", "here", "--fleet", "local")
    assert on_local.output == "volume here created (fleet local, instance local)\n"
    no_host = ferry(home, "volume", "create", "third", "--fleet", "lab", "--instance", "lab-5")
    assert (no_host.exit_code, no_host.output) == (
        2,
        "ferry volume create: fleet lab has no instance lab-5: its instances are lab-0, lab-1\n",
    )
    no_fleet = ferry(home, "volume", "create", "fourth", "--fleet", "nope")
    assert (
        no_fleet.output == "ferry volume create: no fleet named nope in project 'p' (see ferry fleet list)\n"
    )
    moved = ferry(home, "volume", "create", "second", "--fleet", "lab")  # would be lab-0 now
    assert moved.exit_code == 2 and "volume second exists on fleet lab, instance lab-1" in moved.output
    bad = ferry(home, "volume", "create", "Bad")
    assert bad.exit_code == 2 and "invalid name 'Bad'" in bad.output


def test_apply_a_volume_configuration(home: Path, tmp_path: Path) -> None:
    file = tmp_path / "volume.yml"
    file.write_text("type: volume\nname: models\nsize: 100GB\n")
    applied = ferry(home, "apply", "-y", "-f", str(file))
    assert applied.exit_code == 0, applied.output
    lines = applied.output.splitlines()
    assert lines[0] == f"{file}: warning: Ferry does not act on yet: size"
    assert lines[-1] == "volume models created (fleet local, instance local)"
    assert ferry(home, "apply", "-y", "-f", str(file)).output.splitlines()[-1] == (
        "volume models unchanged (fleet local, instance local)"
    )
    renamed = ferry(home, "apply", "-y", "-f", str(file), "-n", "weights")
    assert renamed.output.splitlines()[-1] == "volume weights created (fleet local, instance local)"
    registered = tmp_path / "registered.yml"
    registered.write_text("type: volume\nname: disk\nvolume_id: vol-1\n")
    refused = ferry(home, "apply", "-y", "-f", str(registered))
    assert refused.exit_code == 2 and "volume_id: Ferry cannot register a cloud disk" in refused.output
    assert [v["name"] for v in listed(home)] == ["models", "weights"]


# --- where a run naming volumes goes ---------------------------------------------------------------------


def task(**fields: object) -> TaskConfiguration:
    conf = parse_configuration({"type": "task", "commands": ["x"], "resources": SMALL, **fields})
    assert isinstance(conf, TaskConfiguration)
    return conf


def test_a_run_goes_to_the_fleet_and_instances_of_its_volumes(home: Path, store: Store) -> None:
    ssh_fleet(store, "lab", hosts=2)
    ssh_fleet(store, "farm", hosts=1)
    assert ferry(home, "volume", "create", "d-0", "--fleet", "lab").exit_code == 0
    assert ferry(home, "volume", "create", "d-1", "--fleet", "lab", "--instance", "lab-1").exit_code == 0
    assert ferry(home, "volume", "create", "e-0", "--fleet", "lab").exit_code == 0
    assert ferry(home, "volume", "create", "e-1", "--fleet", "farm").exit_code == 0
    per_node = task(nodes=2, volumes=["d-${{ dstack.node_rank }}:/data", "/cache:/cache"])
    assert run_volumes(store, "p", per_node) == ("lab", {"d-0": "lab-0", "d-1": "lab-1"})
    assert run_volumes(store, "p", task()) == (None, {})
    assert run_volumes(store, "p", task(volumes=["missing:/m"])) == (None, {})  # the job fails by name
    with pytest.raises(FerryError, match=r"the volumes of node 0 \(d-0, d-1\) are on different instances"):
        run_volumes(store, "p", task(volumes=["d-0:/a", "d-1:/b"]))
    with pytest.raises(FerryError, match=r"the run's volumes are in different fleets \(farm, lab\)"):
        run_volumes(store, "p", task(nodes=2, volumes=["e-${{ dstack.node_rank }}:/a"]))
    with pytest.raises(
        FerryError, match="the run's volumes are in fleet lab, which its `fleets` does not name"
    ):
        run_volumes(store, "p", task(fleets=["farm"], volumes=["d-0:/a"]))
    ssh_fleet(store, "lab", hosts=2, status="deleted")
    with pytest.raises(FerryError, match="the run's volumes are in fleet lab, which is deleted"):
        run_volumes(store, "p", task(volumes=["d-0:/a"]))
