"""`files` placed outside the job's code (docs/runs.md#files): the code archive carries them under
FILES_IN_ARCHIVE; once it is unpacked they are moved out of the code into the task's own directory, where
a host process finds them (never the host's own paths), and from where a container gets each one bound at
the path it asked for.

The task's `files/` directory is the archive's FILES_IN_ARCHIVE as it is: `abs/<path>` for an absolute
destination, `home/<path>` for one in the home, and the manifest naming each of `files` in order.
"""

from __future__ import annotations

import posixpath
import shutil
from pathlib import Path

from agent.records import TaskPaths
from core.files_manifest import FILES_IN_ARCHIVE, FILES_MANIFEST, Placed, placed_at, read_manifest
from core.wire.repo_clone import RepoClone

ROOT_HOME = "/root"


class FilesError(ValueError):
    """The job's `files` cannot be placed as asked."""


def files_dir(paths: TaskPaths) -> Path:
    """Where the task's placed files are: `abs/...`, `home/...` (the home of a host process's `~`)."""
    return paths.root / "files"


def move_out_of_code(paths: TaskPaths) -> None:
    """After the code is unpacked: its FILES_IN_ARCHIVE becomes the task's files_dir (an earlier attempt's
    replaced), so that the job's code holds only what the user's code and in-code `files` are."""
    unpacked = paths.workdir / FILES_IN_ARCHIVE
    target = files_dir(paths)
    if target.exists():
        shutil.rmtree(target)
    if unpacked.is_dir() and not unpacked.is_symlink():
        unpacked.rename(target)


def placed_files(paths: TaskPaths, key: str = "files") -> list[Placed]:
    """Each of the job's `files` (or local `repos` placed as they are), in the configuration's order; []
    for a job without them."""
    manifest = files_dir(paths) / posixpath.relpath(FILES_MANIFEST, FILES_IN_ARCHIVE)
    try:
        text = manifest.read_text()
    except FileNotFoundError:
        return []
    try:
        return read_manifest(text, key)
    except ValueError as exc:
        raise FilesError(f"{key}: {exc}") from exc


def placed_repos(paths: TaskPaths, clones: list[RepoClone]) -> list[Placed]:
    """Where the job's `repos` are, but the one that is its code (docs/runs.md#repos): the local ones
    placed as `files` are, then the cloned ones. A container binds those outside the code."""
    return [*placed_files(paths, "repos"), *(placed_at(clone.place) for clone in clones)]


def host_paths(paths: TaskPaths, placed: list[Placed]) -> list[str]:
    """Where a host process finds each of `files`: in its code, or under files_dir (an absolute path is
    never written on the host itself, nor a `~` path in the agent's home)."""
    return [
        str(files_dir(paths) / entry.under_files)
        if entry.under_files is not None
        else str(paths.workdir / (entry.in_code or "."))  # pathlib drops a "."
        for entry in placed
    ]


def container_home(user: str | None, image_env: dict[str, str]) -> str | None:
    """The home of the container's user, as `~` in `files` means it: /root for root (or no user), else
    the image's HOME; None when the image does not say (the job is then refused, naming it)."""
    name = (user or "").split(":", 1)[0]
    if name in ("", "root", "0"):
        return ROOT_HOME
    return image_env.get("HOME") or None


def container_path(entry: Placed, code_dir: str, home: str | None) -> str:
    """Where the job in its container finds one of `files`: FilesError for a home path with no home."""
    if entry.destination is None:
        return posixpath.normpath(posixpath.join(code_dir, entry.in_code or "."))
    if entry.destination == "~" or entry.destination.startswith("~/"):
        if home is None:
            raise FilesError(
                f"files: {entry.destination}: the image names no HOME for its user; give an absolute path"
            )
        return posixpath.normpath(home + entry.destination[1:])
    return entry.destination


def container_binds(paths: TaskPaths, placed: list[Placed], home: str | None) -> list[str]:
    """A bind per file placed outside the code, at its path in the container, parents first."""
    outside = [entry for entry in placed if entry.under_files is not None]
    binds = [
        (container_path(entry, "/", home), files_dir(paths) / (entry.under_files or "")) for entry in outside
    ]
    return [f"{source}:{target}:rw" for target, source in sorted(binds)]
