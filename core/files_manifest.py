"""Where a run's `files` outside its code travel in the code archive, and where the agent places them
(docs/runs.md#files): the part the agent shares with core.configuration.code_sources. Standard library
only, for Python 3.9: the agent's bundle runs it on the hosts' own Python (docs/fleets.md#what-a-host-needs).
"""

from __future__ import annotations

import json
import posixpath
from pathlib import PurePosixPath
from typing import NamedTuple

# The code archive's directory of the `files` placed outside the code, which the agent moves out of the
# code into the task's own directory, as `abs/<path>` and `home/<path>` (docs/runs.md#files).
FILES_IN_ARCHIVE = ".ferry-files"
FILES_MANIFEST = f"{FILES_IN_ARCHIVE}/manifest.json"
ABSOLUTE_DIR = "abs"
HOME_DIR = "home"


class Placed(NamedTuple):
    """Where one of `files` is once the archive is unpacked: `in_code` (a path in the code, "." for all
    of it), or `under_files` (a path under the task's FILES_IN_ARCHIVE directory, moved out of the code)
    and `destination` (the absolute path or `~/...` the job asked for)."""

    in_code: str | None
    under_files: str | None
    destination: str | None


def placed_at(archive_name: str) -> Placed:
    """The inverse of archive_path, for the agent: where a manifest's entry is to be placed.
    ValueError for a name archive_path does not make."""
    parts = PurePosixPath(archive_name).parts
    if archive_name != posixpath.normpath(archive_name) or ".." in parts or posixpath.isabs(archive_name):
        raise ValueError(f"{archive_name!r} is not a path in the code")
    if not parts or parts[0] != FILES_IN_ARCHIVE:
        return Placed(in_code=archive_name, under_files=None, destination=None)
    under = posixpath.join(*parts[1:]) if len(parts) > 1 else ""
    if parts[1:2] == (HOME_DIR,):
        return Placed(None, under, "~" if len(parts) == 2 else "~/" + posixpath.join(*parts[2:]))
    if parts[1:2] == (ABSOLUTE_DIR,) and len(parts) > 2:
        return Placed(None, under, "/" + posixpath.join(*parts[2:]))
    raise ValueError(f"{archive_name!r} is not a placed file")


def manifest(archive_names: list[str], repos: list[str] | None = None) -> bytes:
    """The archive's FILES_MANIFEST: where each of `files` is in it, in the configuration's order (the
    agent sets FERRY_FILE_<n> from it), and each local repo placed like them (docs/runs.md#repos).
    Paths only: never a file's contents."""
    listed: dict[str, list[str]] = {"files": archive_names, **({"repos": repos} if repos else {})}
    return json.dumps(listed, sort_keys=True).encode()


def read_manifest(text: str, key: str = "files") -> list[Placed]:
    """FILES_MANIFEST's entries of `files` (or of `repos`), placed (placed_at); ValueError for one that
    is not what manifest writes."""
    names = json.loads(text).get(key, [] if key == "repos" else None)
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValueError(f"the files manifest's {key} is not a list of paths")
    return [placed_at(name) for name in names]
