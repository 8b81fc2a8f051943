"""`repos` and `files`: what of the user's machine goes with a run, in dstack's forms (docs/runs.md#code).

Ferry sends one directory with every run, the job's code (its working directory on the instance). By
default it is the configuration file's directory. The first local repo of `repos` at the working directory
replaces it; every other local repo is placed as a `files` mapping LOCAL:PATH would be, and a repo by `url`
is cloned on the instance by the agent, at the place archive_path gives (docs/runs.md#repos).
`files: [LOCAL[:PATH]]` adds files or directories: at PATH in the code when it is under the working
directory, else (an absolute PATH, `~/...`, or one that goes up out of it) beside the code in the archive,
for the agent to place (docs/runs.md#files).
"""

from __future__ import annotations

import posixpath
import re
from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from core.configuration.model import ConfigModel

# The agent's part of `files` (stdlib only: it runs on the hosts' Python 3.9).
from core.files_manifest import ABSOLUTE_DIR, FILES_IN_ARCHIVE, HOME_DIR

_DEFAULT_PATH = "."
# Where a container job's code is (agent/containers/config.py): a relative `files` destination is the
# working directory's, which is this in a container unless `working_dir` is absolute.
CONTAINER_CODE_DIR = "/workflow"


class RepoExistsAction(StrEnum):
    ERROR = "error"
    SKIP = "skip"


def _split_mapping(value: str) -> list[str]:
    """`a:b` as dstack splits it: a URL's `scheme://host:port` or `user@host:` keeps its colons."""
    start = 0
    if "://" in value:
        slash = value.find("/", value.index("://") + 3)
        start = len(value) if slash < 0 else slash
    elif "@" in value.split(":", 1)[0] and ":" in value:
        start = value.index(":") + 1
    head, colon, rest = value[start:].partition(":")
    return [value[:start] + head, *(rest.split(":") if colon else [])]


class RepoSpec(ConfigModel):
    """One of `repos`: a local directory (`local_path`) or a Git URL (`url`), checked out at `path`."""

    local_path: str | None = Field(default=None, min_length=1)
    url: str | None = Field(default=None, min_length=1)
    branch: str | None = None
    hash: str | None = None
    path: str = Field(default=_DEFAULT_PATH, min_length=1)
    if_exists: RepoExistsAction = RepoExistsAction.ERROR

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        parts = _split_mapping(value)
        if len(parts) > 2 or not all(parts):
            raise ValueError(f"expected PATH, URL, PATH:DEST or URL:DEST, got {value!r}")
        key = "url" if "://" in parts[0] or "@" in parts[0] else "local_path"
        return {key: parts[0], **({"path": parts[1]} if len(parts) == 2 else {})}

    @model_validator(mode="after")
    def _local_or_url(self) -> RepoSpec:
        if (self.local_path is None) == (self.url is None):
            raise ValueError("give either `local_path` or `url`")
        if (self.url or "").startswith("-") or (self.branch or "").startswith("-"):
            raise ValueError("a url or a branch cannot start with `-`")
        if self.hash is not None and not _HASH.match(self.hash):
            raise ValueError(f"hash: {self.hash!r} is not a commit hash (4 to 64 hexadecimal digits)")
        _check_destination(self.path)
        return self

    def as_file(self) -> FileMapping:
        """Where it goes, as the `files` mapping of the same path (a URL's source is never read)."""
        return FileMapping(local_path=self.local_path or self.url or "", path=self.path)


class FileMapping(ConfigModel):
    """One of `files`: a local file or directory (relative to the configuration file's directory, absolute,
    or `~/...` on the user's machine), placed at `path` (relative to the working directory, absolute, or
    `~/...`: the job's home; the local path itself when not given). docs/runs.md#files."""

    local_path: str = Field(min_length=1)
    path: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        parts = value.split(":")
        if len(parts) > 2 or not all(parts):
            raise ValueError(f"expected LOCAL or LOCAL:PATH, got {value!r}")
        return {"local_path": parts[0], "path": parts[-1]}

    @model_validator(mode="after")
    def _placeable(self) -> FileMapping:
        _check_destination(self.path)
        return self


def _check_destination(path: str) -> None:
    if path.startswith("~") and not _is_home(path):
        raise ValueError(f"{path}: only the job's own home, `~/...`, can be named with `~`")
    if _is_home(path) and _up_out(posixpath.normpath(path[1:].lstrip("/") or ".")):
        raise ValueError(f"{path}: goes up (`..`) out of the home")
    if posixpath.isabs(path) and posixpath.normpath(path) in ("/", "//"):
        raise ValueError(f"{path}: a file or directory cannot replace the root directory")


_HASH = re.compile(r"^[0-9a-fA-F]{4,64}$")


def code_repo(repos: list[RepoSpec]) -> int | None:
    """The index of the local repo Ferry sends as the job's code instead of the configuration file's
    directory: the first local repo at the working directory. None: no such repo."""
    for index, repo in enumerate(repos):
        if repo.local_path is not None and _is_here(repo.path):
            return index
    return None


def code_is_empty(repos: list[RepoSpec]) -> bool:
    """Whether the job's code starts empty: a repo by `url` is cloned at the working directory, and no
    local repo is there (the configuration file's directory is then not sent, as dstack sends none)."""
    return code_repo(repos) is None and any(r.url is not None and _is_here(r.path) for r in repos)


def placed_repos(repos: list[RepoSpec]) -> list[tuple[int, RepoSpec]]:
    """The local repos placed as `files` are (every one but code_repo's), with their index in `repos`."""
    code = code_repo(repos)
    return [(i, repo) for i, repo in enumerate(repos) if repo.local_path is not None and i != code]


def cloned_repos(repos: list[RepoSpec]) -> list[tuple[int, RepoSpec]]:
    """The repos by `url`, cloned on the instance by the agent, with their index in `repos`."""
    return [(i, repo) for i, repo in enumerate(repos) if repo.url is not None]


def single_branch(configured: bool | None, run_type: str) -> bool:
    """dstack's default: false for a dev environment, true for a task or a service."""
    return configured if configured is not None else run_type != "dev-environment"


def destination(mapping: FileMapping, working_dir: str | None) -> str:
    """Where one of `files` goes, as the job sees it in a container: an absolute POSIX path, or `~` or
    `~/...` (the job's home). A relative path is the working directory's: CONTAINER_CODE_DIR, or under it,
    or an absolute working_dir (`../examples` with none is `/examples`, as in dstack)."""
    if _is_home(mapping.path):
        rest = posixpath.normpath(mapping.path[1:].lstrip("/") or ".")
        return "~" if rest == "." else f"~/{rest}"
    base = posixpath.join(CONTAINER_CODE_DIR, working_dir or ".")
    return _clean(posixpath.join(base, mapping.path))


def code_path(mapping: FileMapping, working_dir: str | None) -> str | None:
    """Where a file of `files` goes in the job's code (a relative POSIX path; "." for the code itself), or
    None when that is outside it: a home path, an absolute path outside CONTAINER_CODE_DIR, or any path
    when working_dir is absolute (a host process then starts there, not in its code)."""
    if working_dir is not None and posixpath.isabs(working_dir):
        return None
    target = destination(mapping, working_dir)
    if target == CONTAINER_CODE_DIR:
        return "."
    if target.startswith(f"{CONTAINER_CODE_DIR}/"):
        return target[len(CONTAINER_CODE_DIR) + 1 :]
    return None


def archive_path(mapping: FileMapping, working_dir: str | None) -> str:
    """Where a file of `files` is in the code archive: its code_path, or under FILES_IN_ARCHIVE, `abs/...`
    for an absolute destination and `home/...` for one in the home (the agent places those: placed_at)."""
    in_code = code_path(mapping, working_dir)
    if in_code is not None:
        return in_code
    target = destination(mapping, working_dir)
    if target == "~":
        return f"{FILES_IN_ARCHIVE}/{HOME_DIR}"
    if target.startswith("~/"):
        return f"{FILES_IN_ARCHIVE}/{HOME_DIR}/{target[2:]}"
    return f"{FILES_IN_ARCHIVE}/{ABSOLUTE_DIR}{target}"


def _clean(path: str) -> str:
    cleaned = posixpath.normpath(path)
    return "/" + cleaned.lstrip("/")  # normpath keeps a leading `//`


def _is_home(path: str) -> bool:
    return path == "~" or path.startswith("~/")


def _up_out(path: str) -> bool:
    return path == ".." or path.startswith("../")


def _is_here(path: str) -> bool:
    return posixpath.normpath(path) == _DEFAULT_PATH
