"""The agent's clones of `repos` by url (agent/repos.py, docs/runs.md#repos), with the host's own git against
real remotes (testbed/git_servers.py): branch, hash, single_branch, places, if_exists, a token through
GIT_ASKPASS, a key through GIT_SSH_COMMAND to an sshd, and failures in one line with the credential
masked."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import secret_memory
from agent.records import TaskPaths
from agent.repos import NO_GIT, RepoCloneError, clone_repos
from core.wire.agent_api import JobSpec
from core.wire.repo_clone import RepoClone
from testbed.git_servers import Remote, git, git_daemon, git_sshd, make_remote, private_http

TOKEN = "tok-7f3a9c1e5b2d4f60"


@pytest.fixture(scope="module")
def remotes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Remote]]:
    root = tmp_path_factory.mktemp("remotes")
    public = make_remote(root, "repo")
    make_remote(root / "p", "private", "private text\n")
    with git_daemon(root / "served") as daemon, private_http(root / "p" / "served", TOKEN) as http:
        yield f"{daemon}/repo.git", f"{http}/private.git", public


def paths(tmp_path: Path) -> TaskPaths:
    (tmp_path / "workdir").mkdir(parents=True)
    return TaskPaths(tmp_path)


def test_branch_hash_single_branch_and_places(remotes: tuple[str, str, Remote], tmp_path: Path) -> None:
    url, _, remote = remotes
    task = paths(tmp_path)
    clone_repos(
        task,
        [
            RepoClone(index=0, url=url, place=".", single_branch=True),
            RepoClone(index=1, url=url, place="dev", branch="dev", single_branch=False),
            RepoClone(index=2, url=url, place=".ferry-files/abs/opt/pinned", hash=remote.first),
            RepoClone(index=3, url=url, place="dev", if_exists="skip"),
        ],
    )
    code = task.workdir
    assert (code / "a.txt").read_text() == "main two\n" and not (code / "dev.txt").exists()
    assert "dev" not in git("for-each-ref", "refs/remotes", cwd=code)  # --single-branch
    assert (code / "dev" / "dev.txt").read_text() == "on dev\n"
    assert "refs/remotes/origin/main" in git("for-each-ref", "refs/remotes", cwd=code / "dev")
    pinned = tmp_path / "files" / "abs" / "opt" / "pinned"
    assert git("rev-parse", "HEAD", cwd=pinned) == remote.first
    assert (pinned / "a.txt").read_text() == "main one\n"


def test_a_destination_not_empty_fails_or_is_skipped(
    remotes: tuple[str, str, Remote], tmp_path: Path
) -> None:
    url, _, _ = remotes
    task = paths(tmp_path)
    (task.workdir / "lib").mkdir()
    (task.workdir / "lib" / "mine.txt").write_text("mine\n")
    clone_repos(task, [RepoClone(index=0, url=url, place="lib", if_exists="skip")])
    assert sorted(p.name for p in (task.workdir / "lib").iterdir()) == ["mine.txt"]
    with pytest.raises(RepoCloneError) as raised:
        clone_repos(task, [RepoClone(index=1, url=url, place="lib")])
    assert str(raised.value) == f"repos[1]: {url}: lib already exists and is not empty (if_exists: error)"


def test_a_private_repo_with_its_token_and_without(remotes: tuple[str, str, Remote], tmp_path: Path) -> None:
    _, private, _ = remotes
    task = paths(tmp_path)
    clone_repos(task, [RepoClone(index=0, url=private, place=".ferry-files/home/p", token=TOKEN)])
    assert (tmp_path / "files" / "home" / "p" / "secret.txt").read_text() == "private text\n"
    assert TOKEN not in (tmp_path / "files" / "home" / "p" / ".git" / "config").read_text()
    with pytest.raises(RepoCloneError) as raised:
        clone_repos(task, [RepoClone(index=1, url=private, place="q")])
    assert str(raised.value).startswith(
        f"repos[1]: git clone {private} failed: fatal: could not read Username"
    )


def test_a_private_repo_over_ssh_with_its_key(remotes: tuple[str, str, Remote], tmp_path: Path) -> None:
    _, _, remote = remotes
    with git_sshd(tmp_path / "sshd") as (server, key):
        url = f"{server}{remote.bare}"
        task = paths(tmp_path / "task")
        before = set(Path(tempfile.gettempdir()).glob("ferry-git-*"))
        clone_repos(task, [RepoClone(index=0, url=url, place="r", branch="dev", ssh_key=key)])
        assert (task.workdir / "r" / "dev.txt").read_text() == "on dev\n"
        assert set(Path(tempfile.gettempdir()).glob("ferry-git-*")) == before  # the key's directory removed
        with pytest.raises(RepoCloneError) as raised:
            clone_repos(task, [RepoClone(index=1, url=url, place="s")])  # no key: refused
    assert str(raised.value).startswith(
        f"repos[1]: git clone {url} failed: fatal: Could not read from remote"
    )


def test_a_wrong_hash_fails_in_one_line_masked(remotes: tuple[str, str, Remote], tmp_path: Path) -> None:
    _, private, _ = remotes
    task = paths(tmp_path)
    wrong = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(RepoCloneError) as raised:
        clone_repos(task, [RepoClone(index=0, url=private, place="p", hash=wrong, token=TOKEN)])
    message = str(raised.value)
    assert (
        message.startswith(f"repos[0]: git clone {private} at {wrong} failed: fatal: ")
        and "\n" not in message
    )
    with_password = private.replace("http://", f"http://u:{TOKEN}@")
    with pytest.raises(RepoCloneError) as raised:
        clone_repos(task, [RepoClone(index=1, url=with_password, place="q", hash=wrong)])
    assert TOKEN not in str(raised.value) and "u:***@" in str(raised.value)


def test_a_host_without_git_fails_saying_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RepoCloneError, match=r"^repos: this host has no `git`") as raised:
        clone_repos(paths(tmp_path), [RepoClone(index=0, url="git://h/r", place=".")])
    assert str(raised.value) == NO_GIT


def test_the_agent_writes_no_credential_and_holds_it_in_memory(tmp_path: Path) -> None:
    clone = RepoClone(index=2, url="https://h/r", place=".", token=TOKEN, ssh_key="-----KEY-----\nabcdefgh\n")
    spec = JobSpec(run_name="r", repos=[clone, RepoClone(index=3, url="https://h/s", place="s")])
    written = secret_memory.written_spec(tmp_path, spec)
    assert (written.repos[0].token, written.repos[0].ssh_key, written.repos[1].token) == ("", "", None)
    job = tmp_path / "job.json"
    job.write_text(written.model_dump_json())
    assert TOKEN not in job.read_text() and "abcdefgh" not in job.read_text()
    assert secret_memory.read_spec(tmp_path, written) == spec
    assert not secret_memory.lost(tmp_path, None, job)
    assert secret_memory.masked(tmp_path, f"said {TOKEN} and abcdefgh") == "said *** and ***"
    secret_memory.forget(tmp_path)
    assert secret_memory.lost(tmp_path, None, job)  # a restarted agent: its job cannot clone any more
