"""`repos` by url, cloned on the instance before the job starts (docs/runs.md#repos): with the host's own
`git`, each at its place as `files` are placed (agent/files.py: in the code, or in the task's `files/`,
bound at its path in a container), with its credentials from memory (agent/secret_memory.py). What git
says is masked before it reaches a message; its output is never logged.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from agent.files import files_dir
from agent.records import TaskPaths
from core.files_manifest import placed_at
from core.masking import mask
from core.repo_credentials import without_password
from core.wire.repo_clone import RepoClone

CLONE_TIMEOUT = 3600.0
NO_GIT = "repos: this host has no `git` to clone the job's repos with: install it (docs/runs.md#repos)"
# What git asks for a token: any user name works with GitHub's and GitLab's tokens; a URL with
# `user@` names its own, and git then asks only for the password.
TOKEN_USER = "x-access-token"
_ASKPASS = """#!/bin/sh
case "$1" in
Username*) printf '%s\\n' "$FERRY_GIT_USER" ;;
*) printf '%s\\n' "$FERRY_GIT_TOKEN" ;;
esac
"""


class RepoCloneError(Exception):
    """A repo not cloned: one line naming it, with what git said (credentials masked)."""


def clone_repos(paths: TaskPaths, repos: list[RepoClone]) -> None:
    """Clone each repo at its place, in the configuration's order; RepoCloneError for the first that fails."""
    if not repos:
        return
    git = shutil.which("git")
    if git is None:
        raise RepoCloneError(NO_GIT)
    for repo in repos:
        _clone(git, paths, repo)


def repo_path(paths: TaskPaths, repo: RepoClone) -> Path:
    """Where the agent clones `repo`: in the code, or under the task's files directory."""
    placed = placed_at(repo.place)
    if placed.under_files is not None:
        return files_dir(paths) / placed.under_files
    return paths.workdir if placed.in_code in (None, ".") else paths.workdir / placed.in_code


def _clone(git: str, paths: TaskPaths, repo: RepoClone) -> None:
    target = repo_path(paths, repo)
    url = without_password(repo.url)
    what = f"repos[{repo.index}]"
    if target.is_symlink() or (target.exists() and (not target.is_dir() or any(target.iterdir()))):
        if repo.if_exists == "skip":
            return
        where = placed_at(repo.place).destination or placed_at(repo.place).in_code
        raise RepoCloneError(f"{what}: {url}: {where} already exists and is not empty (if_exists: error)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with _credentials(repo) as (options, env):
        argv = [git, *options, "clone", "--quiet", "--no-recurse-submodules"]
        argv += ["--single-branch"] if repo.single_branch else ["--no-single-branch"]
        argv += ["--branch", repo.branch] if repo.branch else []
        argv += ["--no-checkout"] if repo.hash else []
        _git([*argv, "--", repo.url, str(target)], env, repo, f"{what}: git clone {url} failed")
        if repo.hash:
            checkout = [git, "-C", str(target), "checkout", "--quiet", "--detach", repo.hash]
            _git(checkout, env, repo, f"{what}: git clone {url} at {repo.hash} failed")


def _git(argv: list[str], env: dict[str, str], repo: RepoClone, failed: str) -> None:
    try:
        done = subprocess.run(
            argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=CLONE_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise RepoCloneError(f"{failed}: no answer within {CLONE_TIMEOUT:.0f} s") from None
    except OSError as exc:
        raise RepoCloneError(f"{failed}: {exc}") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace") + done.stdout.decode(errors="replace")
        raise RepoCloneError(f"{failed}: {_reason(said, repo)}")


def _reason(output: str, repo: RepoClone) -> str:
    """git's reason in one line: its last `fatal:` or `error:` line (else its last line), masked."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    reasons = (
        [line for line in lines if line.startswith(("fatal:", "error:"))] or lines or ["no reason given"]
    )
    secrets = [line for value in repo.credentials() for line in [value, *value.splitlines()]]
    return mask(" ".join(reasons[-1].split()), secrets)


@contextlib.contextmanager
def _credentials(repo: RepoClone) -> Iterator[tuple[list[str], dict[str, str]]]:
    """git's options and environment for `repo`: a token through GIT_ASKPASS, a key through
    GIT_SSH_COMMAND, each from a directory of the agent's only (0700), removed after. No prompt, no
    credential helper: nothing is asked, nothing stored."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    options = ["-c", "credential.helper=", "-c", "protocol.ext.allow=never"]
    if not repo.credentials():
        env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
        yield options, env
        return
    directory = Path(tempfile.mkdtemp(prefix="ferry-git-"))  # mode 0700
    try:
        if repo.token:
            askpass = directory / "askpass"
            askpass.write_text(_ASKPASS)
            askpass.chmod(0o700)
            env.update(GIT_ASKPASS=str(askpass), FERRY_GIT_USER=TOKEN_USER, FERRY_GIT_TOKEN=repo.token)
        if repo.ssh_key:
            key = directory / "key"
            key.touch(mode=0o600)
            key.write_text(repo.ssh_key if repo.ssh_key.endswith("\n") else repo.ssh_key + "\n")
            known = directory / "known_hosts"
            env["GIT_SSH_COMMAND"] = (
                f"ssh -i {shlex.quote(str(key))} -o IdentitiesOnly=yes -o BatchMode=yes "
                f"-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={shlex.quote(str(known))}"
            )
        yield options, env
    finally:
        shutil.rmtree(directory, ignore_errors=True)
