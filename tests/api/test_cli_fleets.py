"""`ferry fleet list` and `ferry apply -f fleet.yml` through the real API process, as far as they go
without Temporal (docs/teams.md#fleets): what the store answers, and a fleet refused before anything is
made. tests/e2e/test_runs_by_role.py applies and deletes one on the embedded stack."""

from __future__ import annotations

import json
from pathlib import Path

from cli import exit_codes
from tests.api.conftest import Api
from tests.api.test_cli_teams import as_user, ferry


def test_a_fleet_of_nodes_no_backend_can_create_is_refused_before_the_plan(api: Api, tmp_path: Path) -> None:
    cloud = tmp_path / "cloud.yml"
    cloud.write_text("type: fleet\nname: cloud\nnodes: 0..2\n")
    result = ferry(tmp_path, "apply", "-y", "-f", str(cloud), "-p", "a", **as_user(api, "alice"))
    assert result.exit_code == exit_codes.USAGE
    assert result.output.splitlines() == [
        "ferry apply: fleet cloud has `nodes`, and project a has no backend that can create instances "
        "(it has none): apply one first (docs/backends.md)"
    ]
    assert api.store.list_fleets("a") == []


def test_a_member_lists_the_projects_fleets_and_an_outsider_is_refused(api: Api, tmp_path: Path) -> None:
    listed = ferry(tmp_path, "fleet", "list", "--json", "-p", "a", **as_user(api, "bob"))
    assert (listed.exit_code, json.loads(listed.stdout)) == (0, [])
    outsider = ferry(tmp_path, "fleet", "list", "-p", "a", **as_user(api, "carol"))
    assert (outsider.exit_code, outsider.stderr) == (
        exit_codes.DENIED,
        "ferry fleet list: carol is not a member of project a\n",
    )
