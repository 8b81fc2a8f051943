"""`ferry secret` through the real API process as a project's manager, user and outsider
(docs/teams.md#secrets): the API seals the value and records who changed what; a refusal is one line with
exit code 5 and changes nothing; the user's CLI never holds Ferry's key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli import exit_codes
from store.keys import ENV_KEYS, process_keys
from store.secret_repository import open_secret
from tests.api.conftest import Api
from tests.api.test_cli_teams import as_user, ferry

ROOT = Path(__file__).resolve().parents[2]


def test_a_manager_sets_a_user_lists_and_each_change_names_its_actor(api: Api, tmp_path: Path) -> None:
    alice, bob = as_user(api, "alice"), as_user(api, "bob")
    set_ = ferry(tmp_path, "secret", "set", "HF_TOKEN", "-p", "a", stdin="hf_value-1\n", **alice)
    assert (set_.exit_code, set_.stderr) == (0, "secret HF_TOKEN set\n")
    record = api.store.get_secret("a", "HF_TOKEN")
    assert record is not None and open_secret(process_keys(), record) == "hf_value-1"
    assert record.updated_by == "alice"

    listed = ferry(tmp_path, "secret", "list", "--json", "-p", "a", **bob)
    assert [(s["name"], s["updated_by"]) for s in json.loads(listed.stdout)] == [
        ("HF_TOKEN", "alice"),
        ("KEPT", "alice"),
    ]
    assert "hf_value" not in listed.stdout

    refused = ferry(tmp_path, "secret", "set", "HF_TOKEN", "-p", "a", stdin="bobs\n", **bob)
    assert (refused.exit_code, refused.stderr) == (
        exit_codes.DENIED,
        "ferry secret set: bob may not set and delete secrets in project a: it takes the manager role "
        "(theirs: user)\n",
    )
    outsider = ferry(tmp_path, "secret", "list", "-p", "a", **as_user(api, "carol"))
    assert (outsider.exit_code, outsider.stderr) == (
        exit_codes.DENIED,
        "ferry secret list: carol is not a member of project a\n",
    )
    deleted = ferry(tmp_path, "secret", "delete", "-y", "KEPT", "-p", "a", **bob)
    assert deleted.exit_code == exit_codes.DENIED
    record = api.store.get_secret("a", "HF_TOKEN")
    assert record is not None and open_secret(process_keys(), record) == "hf_value-1"  # bob changed nothing

    url = "https://git.example.com/org/private"
    stored = ferry(tmp_path, "secret", "repo", url, "-p", "a", stdin="ghp_token\n", **alice)
    assert stored.exit_code == 0, stored.output
    assert ferry(tmp_path, "secret", "delete", "-y", "HF_TOKEN", "-p", "a", **alice).exit_code == 0
    gone = ferry(tmp_path, "secret", "delete", "-y", "HF_TOKEN", "-p", "a", **alice)
    assert (gone.exit_code, gone.stderr) == (
        exit_codes.NOT_FOUND,
        "ferry secret delete: no secret named HF_TOKEN in project 'a' (see ferry secret list)\n",
    )
    changes = json.loads(ferry(tmp_path, "project", "changes", "--json", "-p", "a", **bob).stdout)
    assert [(c["actor"], c["name"], c["change"]) for c in changes] == [
        ("alice", "KEPT", "set"),  # the fixture's
        ("alice", "HF_TOKEN", "set"),
        ("alice", stored.stderr.split()[-1], "set"),
        ("alice", "HF_TOKEN", "deleted"),
    ]
    table = ferry(tmp_path, "project", "changes", "-p", "a", **bob).stdout
    assert table.split()[:5] == ["WHEN", "BY", "WHAT", "NAME", "CHANGE"]


def test_a_name_or_value_no_secret_may_have_is_one_line_from_the_api(api: Api) -> None:
    with api.client("alice") as http:
        bad_name = http.put("/api/projects/a/secrets/hf-token", json={"value": "v"})
        nul = http.put("/api/projects/a/secrets/HF_TOKEN", json={"value": "a\0b"})
        nowhere = http.get("/api/projects/nowhere/secrets")
    assert (bad_name.status_code, bad_name.json()["detail"]) == (
        422,
        "'hf-token' is not a secret name: letters, digits and _, not starting with a digit, at most 200",
    )
    assert nul.status_code == 422 and "NUL" in nul.json()["detail"]
    assert nowhere.status_code == 403  # alice is not a member: that it does not exist is not hers to know
    with api.client("root") as http:
        missing = http.get("/api/projects/nowhere/secrets")
    assert (missing.status_code, missing.json()["detail"]) == (404, "no project nowhere")


def test_the_users_cli_sets_a_secret_without_ferrys_key(api: Api, tmp_path: Path) -> None:
    """A user's process has no key and makes none: the API seals (docs/teams.md#secrets)."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    env.update(FERRY_HOME=str(home), FERRY_API_URL=api.url, FERRY_TOKEN="alice-token", FERRY_PROJECT="a")
    assert ENV_KEYS not in env
    done = subprocess.run(
        [sys.executable, "-m", "cli", "secret", "set", "WANDB_KEY"],
        input="wandb-value\n", env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "secret WANDB_KEY set\n")
    record = api.store.get_secret("a", "WANDB_KEY")
    assert record is not None and open_secret(process_keys(), record) == "wandb-value"
    made = [p.name for p in home.rglob("*")] if home.exists() else []
    assert not any("key" in name for name in made), made
