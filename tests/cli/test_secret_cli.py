"""`ferry secret set|list|delete|codec` as an operator's CLI (Temporal's address, no login: the
store itself, docs/teams.md#one-way-in), and the check of a run's secrets before its submission.
docs/secrets.md; tests/api/test_cli_secrets.py runs the same commands through the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cli.errors import FerryError
from cli.main import app
from cli.secret_api import check_secrets
from core.configuration import TaskConfiguration, parse_configuration
from store import Store
from store.keys import process_keys
from store.secret_repository import open_secret

runner = CliRunner()


@pytest.fixture
def home(home: Path, store: Store) -> Path:
    """tests/cli/conftest.py's FERRY_HOME, its store opened first (as the commands open it)."""
    return home


def ferry(home: Path, *args: str, stdin: str | None = None) -> Result:
    env = {
        "FERRY_HOME": str(home),
        "FERRY_DATABASE_URL": f"sqlite:///{home / 'ferry.db'}",
        "FERRY_PROJECT": "p",
        "FERRY_TEMPORAL_ADDRESS": "127.0.0.1:1",  # an operator's: never reached by these commands
        "FERRY_API_URL": "",
        "FERRY_TOKEN": "",
        "FERRY_GATEWAY_URL": "",
    }
    return runner.invoke(app, list(args), env=env, input=stdin)


def test_set_from_stdin_list_names_only_and_delete(home: Path, store: Store) -> None:
    set_ = ferry(home, "secret", "set", "HF_TOKEN", stdin="hf_first-value\n")
    assert (set_.exit_code, set_.stderr) == (0, "secret HF_TOKEN set\n")
    changed = ferry(home, "secret", "set", "HF_TOKEN", stdin="hf_second-value\n")
    assert changed.stderr == "secret HF_TOKEN changed\n"
    record = store.get_secret("p", "HF_TOKEN")
    assert record is not None
    assert open_secret(process_keys(), record) == "hf_second-value"  # sealed, its line end dropped

    listed = ferry(home, "secret", "list", "--json")
    [shown] = json.loads(listed.stdout)
    assert set(shown) == {"name", "key", "created_at", "updated_at", "updated_by"}
    assert (shown["name"], shown["updated_by"]) == ("HF_TOKEN", "operator")
    table = ferry(home, "secret", "list").stdout
    assert table.split()[:4] == ["NAME", "KEY", "UPDATED", "BY"] and "value" not in table

    assert ferry(home, "secret", "delete", "-y", "HF_TOKEN").stderr == "secret HF_TOKEN deleted\n"
    gone = ferry(home, "secret", "delete", "-y", "HF_TOKEN")
    assert (gone.exit_code, gone.stderr) == (
        3,
        "ferry secret delete: no secret named HF_TOKEN in project 'p' (see ferry secret list)\n",
    )
    changes = store.list_changes("p")
    assert [(c.actor, c.name, c.change) for c in changes] == [
        ("operator", "HF_TOKEN", "set"),
        ("operator", "HF_TOKEN", "changed"),
        ("operator", "HF_TOKEN", "deleted"),
    ]


@pytest.mark.parametrize(
    ("name", "stdin", "says"),
    [
        (
            "hf-token",
            "v",
            "'hf-token' is not a secret name: letters, digits and _, not starting with a digit",
        ),
        (  # the name is refused before any value is read
            "hf-token",
            "",
            "'hf-token' is not a secret name: letters, digits and _, not starting with a digit",
        ),
        ("HF_TOKEN", "", "the value is empty: type it at the prompt, or pipe it to stdin"),
        ("HF_TOKEN", "a\0b", "a secret cannot hold a NUL character: no environment variable can"),
    ],
)
def test_what_set_refuses_in_one_line(home: Path, name: str, stdin: str, says: str) -> None:
    refused = ferry(home, "secret", "set", name, stdin=stdin)
    assert refused.exit_code == 2
    assert refused.stderr.splitlines()[-1].startswith(f"ferry secret set: {says}")


def test_the_codec_endpoint_needs_a_running_proxy(home: Path) -> None:
    refused = ferry(home, "secret", "codec")
    assert (refused.exit_code, refused.stderr) == (
        1,
        "ferry secret codec: no proxy is running, and it serves the codec endpoint: start it "
        "(ferry server)\n",
    )


def test_a_run_s_secrets_are_checked_before_it_is_submitted(home: Path, store: Store) -> None:
    ferry(home, "secret", "set", "HF_TOKEN", stdin="v-1")
    named = parse_configuration(
        {"type": "task", "commands": ["x"], "env": ["HF_TOKEN=${{ secrets.HF_TOKEN }}", "B=${{ secrets.B }}"]}
    )
    assert isinstance(named, TaskConfiguration)
    with pytest.raises(FerryError) as missing:
        check_secrets(store, "p", [named], "run train")
    assert str(missing.value) == "run train: secret B is not set in project 'p': ferry secret set B"
    ferry(home, "secret", "set", "B", stdin="v-2")
    check_secrets(store, "p", [named], "run train")
    with pytest.raises(
        FerryError, match="secrets B, HF_TOKEN are not set in project 'other': ferry secret set"
    ):
        check_secrets(store, "other", [named], "run train")


def test_a_repos_token_or_key_is_a_secret_named_after_its_url(
    home: Path, store: Store, tmp_path: Path
) -> None:
    """docs/runs.md#private-repos: one kind per URL, the other deleted; the value read, never an argument."""
    from core.repo_credentials import ssh_key_secret, token_secret

    url = "https://github.com/org/private"
    stored = ferry(home, "secret", "repo", url, stdin="ghp_token-value\n")
    assert (stored.exit_code, stored.stderr) == (0, f"token for {url} stored as secret {token_secret(url)}\n")
    record = store.get_secret("p", token_secret("https://GitHub.com/org/private.git"))
    assert record is not None and open_secret(process_keys(), record) == "ghp_token-value"
    key = tmp_path / "id_deploy"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nxyz\n-----END OPENSSH PRIVATE KEY-----\n")
    stored = ferry(home, "secret", "repo", url, "--ssh-key", str(key))
    assert stored.stderr == f"SSH key for {url} stored as secret {ssh_key_secret(url)}\n"
    assert [secret.name for secret in store.list_secrets("p")] == [ssh_key_secret(url)]
    missing = ferry(home, "secret", "repo", url, "--ssh-key", str(tmp_path / "nowhere"))
    assert missing.exit_code != 0 and "--ssh-key: cannot read" in missing.stderr
