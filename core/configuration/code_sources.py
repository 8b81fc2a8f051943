"""`repos` and `files`: what of the user's machine goes with a run, in dstack's forms (docs/runs.md#code).

Ferry sends one directory with every run, the job's code (its working directory on the instance). By
default it is the configuration file's directory. `repos: [PATH]` (or `{local_path: PATH}`) names another
local directory, relative to the configuration file's. `files: [LOCAL[:PATH]]` adds files or directories to
it at PATH, relative to the working directory. What Ferry cannot place that way — a repo by `url` (a clone
on the instance), a repo or file at an absolute or home path, several repos — stays in the warning line.
"""

from __future__ import annotations

import posixpath
from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from core.configuration.model import ConfigModel

_DEFAULT_PATH = "."


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
    """One of `files`: a local file or directory (relative to the configuration file's directory), copied to
    `path` (relative to the working directory; the local path itself when not given)."""

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


def code_repo(repos: list[RepoSpec]) -> str | None:
    """The local directory Ferry sends as the job's code instead of the configuration's: `repos` of one
    local repo checked out at the working directory. None: the configuration file's own directory."""
    if len(repos) == 1 and repos[0].local_path is not None and _is_here(repos[0].path):
        return repos[0].local_path
    return None


def repos_placed(repos: list[RepoSpec]) -> bool:
    """Whether Ferry does what `repos` asks (code_repo); else it is named in the warning line."""
    return not repos or code_repo(repos) is not None


def code_path(mapping: FileMapping, working_dir: str | None) -> str | None:
    """Where a file of `files` goes in the job's code (a relative POSIX path), or None when that is outside
    it: an absolute or home path, a path that goes up out of it, or any path under an absolute working_dir."""
    if working_dir is not None and posixpath.isabs(working_dir):
        return None
    if posixpath.isabs(mapping.path) or mapping.path.startswith("~"):
        return None
    joined = posixpath.normpath(posixpath.join(working_dir or ".", mapping.path))
    if joined == ".." or joined.startswith("../") or joined == ".":
        return None
    return joined


def files_placed(files: list[FileMapping], working_dir: str | None) -> bool:
    """Whether Ferry places every one of `files` in the job's code; else `files` is in the warning line."""
    return all(code_path(mapping, working_dir) is not None for mapping in files)


def _is_here(path: str) -> bool:
    return posixpath.normpath(path) == _DEFAULT_PATH
