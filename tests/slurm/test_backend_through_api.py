"""`ferry apply -f slurm.yml`, `ferry backend list|delete` through the real API process as a project's
manager and user (docs/teams.md#backends): the user's CLI reads the login key and sends it; the API checks
it against this real cluster's login node, seals it and keeps each change with its actor."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from cli import exit_codes
from store.backend_repository import open_backend_key
from store.keys import process_keys
from testbed.slurm_cluster import SlurmCluster
from tests.api.conftest import Api, api, reset, served  # noqa: F401 (the fixtures, by name)
from tests.api.test_cli_teams import as_user, ferry

# The API's check reaches the login host, whose key the cluster makes for the run.
API_ENV = {"FERRY_SSH_KNOWN_HOSTS": "none"}


def test_a_manager_applies_a_user_lists_and_a_wrong_partition_is_refused_with_slurms_list(
    api: Api,  # noqa: F811
    slurm: SlurmCluster,
    tmp_path: Path,
) -> None:
    alice, bob = as_user(api, "alice"), as_user(api, "bob")
    conf = tmp_path / "slurm.yml"
    backend = {**slurm.backend(tmp_path / "shared"), "name": "hpc"}
    conf.write_text(yaml.safe_dump(backend))
    applied = ferry(tmp_path, "apply", "-y", "-f", str(conf), "-p", "a", **alice)
    assert applied.exit_code == 0, applied.output
    assert applied.stderr.splitlines()[-1] == "backend hpc applied (partitions low, high)"
    [record] = api.store.list_backends("a")
    assert open_backend_key(process_keys(), record) == slurm.login.identity_file.read_text()

    listed = json.loads(ferry(tmp_path, "backend", "list", "--json", "-p", "a", **bob).stdout)
    assert [(b["name"], b["type"]) for b in listed] == [("hpc", "slurm")]
    assert "BEGIN" not in json.dumps(listed)  # never the key
    refused = ferry(tmp_path, "backend", "delete", "-y", "hpc", "-p", "a", **bob)
    assert (refused.exit_code, refused.stderr) == (
        exit_codes.DENIED,
        "ferry backend delete: bob may not manage fleets, volumes and backends in project a: it takes the "
        "manager role (theirs: user)\n",
    )

    conf.write_text(yaml.safe_dump({**backend, "name": "wrong", "partitions": ["gpu"]}))
    wrong = ferry(tmp_path, "apply", "-y", "-f", str(conf), "-p", "a", **alice)
    assert wrong.exit_code == exit_codes.USAGE, wrong.output
    assert wrong.stderr.splitlines()[-1] == (
        "ferry apply: backend wrong: Slurm has no partition gpu (it has high, low)"
    )
    assert [b.name for b in api.store.list_backends("a")] == ["hpc"]

    assert ferry(tmp_path, "backend", "delete", "-y", "hpc", "-p", "a", **alice).exit_code == 0
    assert api.store.list_backends("a") == []
    changes = [(c.actor, c.subject, c.name, c.change) for c in api.store.list_changes("a")]
    assert changes[-2:] == [("alice", "backend", "hpc", "applied"), ("alice", "backend", "hpc", "deleted")]
