"""`ferry volume` and `ferry apply -f volume.yml` through the real API process as a project's manager, user
and outsider (docs/teams.md#volumes): a refusal is one line with exit code 5 and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from cli import exit_codes
from tests.api.conftest import Api
from tests.api.test_cli_teams import as_user, ferry


def test_a_manager_creates_and_deletes_a_user_lists_an_outsider_sees_nothing(
    api: Api, tmp_path: Path
) -> None:
    alice, bob = as_user(api, "alice"), as_user(api, "bob")
    made = ferry(tmp_path, "volume", "create", "data", "-p", "a", **alice)
    assert (made.exit_code, made.stderr) == (0, "volume data created (fleet local, instance local)\n")
    again = ferry(tmp_path, "volume", "create", "data", "-p", "a", **alice)
    assert again.stderr == "volume data unchanged (fleet local, instance local)\n"
    conf = tmp_path / "volume.yml"
    conf.write_text("type: volume\nname: other\nfleet: nowhere\n")
    missing = ferry(tmp_path, "apply", "-y", "-f", str(conf), "-p", "a", **alice)
    assert missing.exit_code == exit_codes.NOT_FOUND
    assert (
        missing.stderr.splitlines()[-1]
        == "ferry apply: no fleet named nowhere in project 'a' (see ferry fleet list)"
    )

    listed = json.loads(ferry(tmp_path, "volume", "list", "--json", "-p", "a", **bob).stdout)
    assert [(v["name"], v["instance"], v["attached_to"]) for v in listed] == [
        ("data", "local", None),
        ("old", "local", None),
    ]
    refused = ferry(tmp_path, "volume", "delete", "-y", "data", "-p", "a", **bob)
    assert (refused.exit_code, refused.stderr) == (
        exit_codes.DENIED,
        "ferry volume delete: bob may not manage fleets, volumes and backends in project a: it takes the "
        "manager role (theirs: user)\n",
    )
    outsider = ferry(tmp_path, "volume", "list", "-p", "a", **as_user(api, "carol"))
    assert (outsider.exit_code, outsider.stderr) == (
        exit_codes.DENIED,
        "ferry volume list: carol is not a member of project a\n",
    )
    assert [v.name for v in api.store.list_volumes("a")] == ["data", "old"]  # nothing changed by refusals

    deleted = ferry(tmp_path, "volume", "delete", "-y", "data", "-p", "a", **alice)
    assert deleted.stderr == "volume data deleted (its directory stays on instance local)\n"
    gone = ferry(tmp_path, "volume", "delete", "-y", "data", "-p", "a", **alice)
    assert (gone.exit_code, gone.stderr) == (
        exit_codes.NOT_FOUND,
        "ferry volume delete: no volume named data in project 'a' (see ferry volume list)\n",
    )


def test_a_configuration_that_does_not_parse_is_one_line(api: Api) -> None:
    with api.client("alice") as http:
        bad = http.post("/api/projects/a/volumes", json={"configuration": {"name": "Bad Name"}})
    assert bad.status_code == 422
    assert bad.json()["detail"].startswith("name: ")
