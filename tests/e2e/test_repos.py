"""dstack's `repos` end to end through `ferry apply` on the embedded stack (docs/runs.md#repos): a host
process's job clones from a `git daemon` the test serves (the default branch with --single-branch, a
branch, a hash, a path outside the code, if_exists: skip), a private remote behind basic authentication
with the token `ferry secret repo` stored, and one over SSH with the key it stored; neither then shows in
a log, an event, `ferry ps`, a file under FERRY_HOME or an answer of the Web UI's API; a local repo at
another path comes in the archive; a clone that fails fails the job with git's reason in one line."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.git_servers import Remote, git_daemon, git_sshd, make_remote, private_http
from tests.e2e.conftest import FERRY, ROOT, SMALL, Ferry, last_line
from tests.e2e.test_secrets_scan import files_holding, holding, ui_answers

TOKEN = "ghp_e2eRepoToken5b7d1c9a3f"
WRONG = "0123456789abcdef0123456789abcdef01234567"


@dataclass(frozen=True)
class Remotes:
    public: str  # git://, no credentials
    private: str  # http://, the token only
    remote: Remote  # what both serve
    ssh: str  # ssh://, the key only
    key: str


@pytest.fixture(scope="module")
def remotes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Remotes]:
    root = tmp_path_factory.mktemp("remotes")
    public = make_remote(root, "repo")
    private = make_remote(root / "p", "private", "private text\n")
    with (
        git_daemon(root / "served") as daemon,
        private_http(root / "p" / "served", TOKEN) as http,
        git_sshd(root / "sshd") as (sshd, key),
    ):
        yield Remotes(f"{daemon}/repo.git", f"{http}/private.git", public, f"{sshd}{private.bare}", key)


def write(directory: Path, name: str, body: str) -> str:
    path = directory / f"{name}.yml"
    path.write_text(f"type: task\nname: {name}\n{body}{SMALL}")
    return str(path)


def commands(*lines: str) -> str:
    return "commands:\n" + "".join(f"  - {json.dumps(line)}\n" for line in lines)


def test_a_job_clones_public_and_private_repos_and_the_credentials_are_nowhere(
    ferry: Ferry, remotes: Remotes, tmp_path: Path
) -> None:
    public, private, remote = remotes.public, remotes.private, remotes.remote
    stored = subprocess.run(
        [*FERRY, "secret", "repo", private],
        cwd=ROOT,
        env=ferry.env,
        input=TOKEN.encode(),
        capture_output=True,
    )
    assert stored.returncode == 0, stored.stderr
    assert stored.stderr.decode().startswith(f"token for {private} stored as secret GIT_TOKEN_")
    key_file = tmp_path / "id_deploy"
    key_file.write_text(remotes.key)
    stored_key = ferry("secret", "repo", remotes.ssh, "--ssh-key", str(key_file))
    assert stored_key.stderr.startswith(f"SSH key for {remotes.ssh} stored as secret GIT_SSH_KEY_"), (
        stored_key
    )
    key_file.unlink()
    key_lines = remotes.key.splitlines()[2:-1]  # past BEGIN and the header every OpenSSH key shares
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "m.py").write_text("local lib\n")
    (lib / ".gitignore").write_text("*.log\n")
    (lib / "run.log").write_text("ignored\n")
    project = tmp_path / "project"
    project.mkdir()
    conf = write(
        project,
        "clones",
        "repos:\n"
        f"  - {public}\n"  # at the working directory: the clone is the code
        f"  - {{url: {public}, branch: dev, path: dev}}\n"
        f"  - {{url: {public}, hash: {remote.first}, path: /opt/ferry-pinned}}\n"
        f"  - {{url: {private}, path: ~/private}}\n"
        f"  - {{url: {remotes.ssh}, path: /opt/via-ssh, branch: dev}}\n"
        f"  - {{url: {public}, path: dev, if_exists: skip}}\n"
        "  - ../lib:/opt/lib\n"
        + commands(
            "cat a.txt dev/dev.txt",
            "git for-each-ref --format='%(refname)' refs/remotes",
            'git -C "$FERRY_FILES_DIR/abs/opt/ferry-pinned" rev-parse HEAD',
            'cat "$FERRY_FILES_DIR/home/private/secret.txt" "$FERRY_FILES_DIR/abs/opt/via-ssh/dev.txt"',
            'cat "$FERRY_FILES_DIR/abs/opt/lib/m.py"',
            'ls -A "$FERRY_FILES_DIR/abs/opt/lib"',
            "ls -A",
        ),
    )
    result = ferry("apply", "-y", "-f", conf, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "main two",  # the remote's default branch
        "on dev",
        "refs/remotes/origin/HEAD",
        "refs/remotes/origin/main",  # --single-branch: a task's default; no origin/dev
        remote.first,
        "private text",
        "on dev",  # over SSH, with the key
        "local lib",
        ".gitignore",
        "m.py",  # its .gitignore honoured: no run.log
        ".git",
        "a.txt",
        "dev",  # nothing of the configuration's directory: the clone is the code
    ]
    assert "warning" not in result.stderr

    shown = [ferry(*args) for args in (["logs", "clones"], ["events", "clones"], ["ps", "-a", "--json"])]
    for output in shown:
        assert holding((output.stdout + output.stderr).encode(), [TOKEN, *key_lines]) == []
    assert files_holding(ferry.home, [TOKEN, *key_lines]) == []
    ui_url = json.loads(ferry("server", "status", "--json").stdout)["ui_url"]
    for answer in ui_answers(ui_url):
        assert holding(answer, [TOKEN, *key_lines]) == []


def test_a_clone_that_fails_fails_the_job_in_one_line(ferry: Ferry, remotes: Remotes, tmp_path: Path) -> None:
    public, private = remotes.public, remotes.private
    conf = write(
        tmp_path, "badhash", f"repos:\n  - {{url: {private}, hash: {WRONG}, path: p}}\n" + commands("true")
    )
    result = ferry("apply", "-y", "-f", conf, timeout=240)
    assert result.returncode != 0
    said = last_line(result.stderr)
    assert said.startswith(
        f"run badhash: failed (job failed): executor error: repos[0]: git clone {private} at {WRONG} failed: "
    )
    assert said.endswith(f"failed: fatal: reference is not a tree: {WRONG}"), result.stderr
    status = [run for run in json.loads(ferry("ps", "-a", "--json").stdout) if run["name"] == "badhash"]
    assert TOKEN not in json.dumps(status) and holding(result.stderr.encode(), [TOKEN]) == []

    conf = write(
        tmp_path,
        "twice",
        f"repos:\n  - {public}:lib\n  - {{url: {public}, path: lib, branch: dev}}\n" + commands("true"),
    )
    result = ferry("apply", "-y", "-f", conf, timeout=240)
    assert last_line(result.stderr) == (
        f"run twice: failed (job failed): executor error: repos[1]: {public}: lib already exists and is "
        "not empty (if_exists: error)"
    )
