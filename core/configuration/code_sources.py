"""`repos` and `files`: what of the user's machine goes with a run, in dstack's forms (docs/runs.md#code).

Ferry sends one directory with every run, the job's code (its working directory on the instance). By
default it is the configuration file's directory. `repos: [PATH]` (or `{local_path: PATH}`) names another
local directory, relative to the configuration file's. `files: [LOCAL[:PATH]]` adds files or directories:
at PATH in the code when it is under the working directory, else (an absolute PATH, `~/...`, or one that
goes up out of it) beside the code in the archive, for the agent to place (docs/runs.md#files). What Ferry
cannot place — a repo by `url` (a clone on the instance), a repo at another path, several repos — stays in
the warning line.
"""

from __future__ import annotations

import posixpath
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
    """`a:b` as dstack splits it: a URL's `scheme://` or `user@host:` keeps its colon."""
    parts = value.split(":")
    if len(parts) > 1 and ("@" in parts[0] or parts[1].startswith("//")):
        parts = [f"{parts[0]}:{parts[1]}", *parts[2:]]
    return parts


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
        return self


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
        if self.path.startswith("~") and not _is_home(self.path):
            raise ValueError(f"{self.path}: only the job's own home, `~/...`, can be named with `~`")
        if _is_home(self.path) and _up_out(posixpath.normpath(self.path[1:].lstrip("/") or ".")):
            raise ValueError(f"{self.path}: goes up (`..`) out of the home")
        if posixpath.isabs(self.path) and posixpath.normpath(self.path) in ("/", "//"):
            raise ValueError(f"{self.path}: a file or directory cannot replace the root directory")
        return self


def code_repo(repos: list[RepoSpec]) -> str | None:
    """The local directory Ferry sends as the job's code instead of the configuration's: `repos` of one
    local repo checked out at the working directory. None: the configuration file's own directory."""
    if len(repos) == 1 and repos[0].local_path is not None and _is_here(repos[0].path):
        return repos[0].local_path
    return None


def repos_placed(repos: list[RepoSpec]) -> bool:
    """Whether Ferry does what `repos` asks (code_repo); else it is named in the warning line."""
    return not repos or code_repo(repos) is not None


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
