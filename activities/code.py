"""Packing a configuration's repo directory into a reproducible tar.gz, honouring `.gitignore`.

The same files give the same bytes (sorted entries, zeroed times and owners), so the archive's hash
addresses it in the store and an unchanged repo is stored once.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import tarfile
from pathlib import Path
from typing import NamedTuple

import pathspec

from core.configuration.code_sources import (
    FileMapping,
    RepoSpec,
    archive_path,
    cloned_repos,
    code_is_empty,
    code_repo,
    placed_repos,
)
from core.files_manifest import FILES_IN_ARCHIVE, FILES_MANIFEST, manifest

# The root's FILES_IN_ARCHIVE is Ferry's place for `files` (docs/runs.md#files), never the user's.
ALWAYS_IGNORED = [".git/", ".venv/", "__pycache__/", "*.pyc", f"/{FILES_IN_ARCHIVE}/"]
# The repo goes with every run into the store: a configuration file in a big directory (a home, /tmp)
# would otherwise have all of it packed, silently and for minutes. Past these, the run is refused.
MAX_FILES = 20_000
MAX_BYTES = 256 * 1024 * 1024


class RepoTooLarge(ValueError):
    """The configuration's directory holds more than a run's code should."""


def _ignore_spec(root: Path) -> pathspec.PathSpec:
    lines = list(ALWAYS_IGNORED)
    gitignore = root / ".gitignore"
    if gitignore.is_file():
        lines += gitignore.read_text(errors="replace").splitlines()
    return pathspec.PathSpec.from_lines("gitignore", lines)


def repo_files(root: Path) -> list[Path]:
    """Files under `root` that `.gitignore` (at the root) does not exclude, relative and sorted.
    RepoTooLarge past MAX_FILES files or MAX_BYTES bytes (found out as soon as it is so)."""
    spec = _ignore_spec(root)
    found: list[Path] = []
    total = 0
    for directory, dirnames, filenames in os.walk(root):
        rel_dir = Path(directory).relative_to(root)
        dirnames[:] = sorted(d for d in dirnames if not spec.match_file(f"{(rel_dir / d).as_posix()}/"))
        for name in filenames:
            rel = rel_dir / name
            path = root / rel
            if not spec.match_file(rel.as_posix()) and path.is_file():
                found.append(rel)
                total += path.stat().st_size
                if len(found) > MAX_FILES or total > MAX_BYTES:
                    raise RepoTooLarge(
                        f"{root} is too big to send with the run (over {MAX_FILES} files or "
                        f"{MAX_BYTES // 2**20} MiB): keep the configuration in its project's directory, "
                        f"or leave files out with {root / '.gitignore'}"
                    )
    return sorted(found)


def repo_id(root: Path, where: str | None = None) -> str:
    """The code's name in the job's `FERRY_REPO_ID`/`DSTACK_REPO_ID`: its directory's name, made a slug, and a
    short hash of where it is on the user's machine (or of its URL, `where`: two `app` directories differ),
    as dstack names one."""
    slug = re.sub(r"[^a-z0-9]+", "-", root.name.lower()).strip("-") or "repo"
    return f"{slug[:40]}-{hashlib.sha256((where or str(root)).encode()).hexdigest()[:8]}"


class MissingCodeSource(ValueError):
    """A repo or a file the configuration names is not on this machine."""


class CodeSources(NamedTuple):
    """What goes with a run (docs/runs.md#code): the directory sent as the job's code (None: none, a repo
    by `url` is cloned there), the `files` and the local `repos` added to it (each at its path in the
    archive: archive_path), and the code's name (repo_id)."""

    root: Path | None
    extra: list[tuple[Path, str]]
    repos: list[tuple[Path, str]]
    name: str


def code_sources(
    config_dir: Path, repos: list[RepoSpec], files: list[FileMapping], working_dir: str | None
) -> CodeSources:
    """The configuration's `repos` and `files` as the archive takes them. A local path is the configuration
    file's directory's, absolute, or `~/...` (expanded here, on the user's machine). MissingCodeSource for
    one that is not there; RepoTooLarge for one past the code's own limits."""
    code = code_repo(repos)
    root: Path | None = config_dir
    if code is not None:
        local = repos[code].local_path or ""
        root = (config_dir / Path(local).expanduser()).resolve()
        if not root.is_dir():
            raise MissingCodeSource(f"repos: {local}: no such directory ({root})")
    elif code_is_empty(repos):
        root = None
    extra = [
        _placed(config_dir, mapping, working_dir, f"files: {mapping.local_path}:{mapping.path}")
        for mapping in files
    ]
    placed = []
    for index, repo in placed_repos(repos):
        mapping = repo.as_file()
        source = (config_dir / Path(mapping.local_path).expanduser()).resolve()
        if not source.is_dir():
            raise MissingCodeSource(f"repos[{index}]: {mapping.local_path}: no such directory ({source})")
        placed.append(_placed(config_dir, mapping, working_dir, f"repos[{index}]: {mapping.local_path}"))
    if root is not None:
        name = repo_id(root)
    else:
        url = next(repo.url for _, repo in cloned_repos(repos) if repo.url)
        name = repo_id(Path(url.rstrip("/").removesuffix(".git").replace(":", "/")), url)
    return CodeSources(root, extra, placed, name)


def _placed(config_dir: Path, mapping: FileMapping, working_dir: str | None, what: str) -> tuple[Path, str]:
    """One `files` mapping's source and its path in the archive; MissingCodeSource, RepoTooLarge."""
    source = (config_dir / Path(mapping.local_path).expanduser()).resolve()
    if not source.is_dir() and not source.is_file():
        raise MissingCodeSource(f"{what}: no such file or directory ({source})")
    target = archive_path(mapping, working_dir)
    if not source.is_dir() and (target == "." or target.endswith(f"/{FILES_IN_ARCHIVE}/home")):
        raise MissingCodeSource(f"{what}: {source} is a file, and {mapping.path} a directory")
    try:
        count, size = _files_and_bytes(source)
    except RepoTooLarge as err:
        raise RepoTooLarge(f"{what}: {err}") from None
    if size > MAX_BYTES:
        raise RepoTooLarge(f"{what}: {source} is too big to send with the run (over {_LIMITS})")
    return source, target


_LIMITS = f"{MAX_FILES} files or {MAX_BYTES // 2**20} MiB"


def _files_and_bytes(source: Path) -> tuple[int, int]:
    """How many files of `source` go with the run, and their bytes (RepoTooLarge past the limits)."""
    if source.is_dir():
        found = repo_files(source)
        return len(found), sum((source / rel).stat().st_size for rel in found)
    return 1, source.stat().st_size


def pack_repo(
    root: Path | None,
    extra: list[tuple[Path, str]] | None = None,
    repos: list[tuple[Path, str]] | None = None,
) -> bytes:
    """The archive of `root`'s files (none without a root), and of each `extra` file or directory and each
    local repo at its path (over `root`'s), with FILES_MANIFEST naming those paths in order when there are
    any. RepoTooLarge when all of them together are past the code's limits."""
    entries: dict[str, Path] = (
        {} if root is None else {rel.as_posix(): root / rel for rel in repo_files(root)}
    )
    for source, target in [*(extra or []), *(repos or [])]:
        if source.is_dir():
            prefix = "" if target == "." else f"{target}/"
            entries.update({f"{prefix}{rel.as_posix()}": source / rel for rel in repo_files(source)})
        else:
            entries[target] = source
    total = sum(path.stat().st_size for path in entries.values())
    if len(entries) > MAX_FILES or total > MAX_BYTES:
        raise RepoTooLarge(f"the code and `files` together are too big to send with the run (over {_LIMITS})")
    listed = None
    if extra or repos:
        listed = manifest([target for _, target in extra or []], [target for _, target in repos or []])
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name in sorted([*entries, *([FILES_MANIFEST] if listed is not None else [])]):
            if name == FILES_MANIFEST and listed is not None:
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(listed), 0o644
                tar.addfile(info, io.BytesIO(listed))
                continue
            path = entries[name]
            info = tarfile.TarInfo(name)
            info.size = path.stat().st_size
            info.mode = _mode(path)
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    return buffer.getvalue()


def _mode(path: Path) -> int:
    """Executable or not, and private (0600, 0700) when the user's own file is: `~/.ssh/id_rsa` must stay
    unreadable to others for ssh to take it (docs/runs.md#files)."""
    mode = 0o755 if os.access(path, os.X_OK) else 0o644
    return mode & 0o700 if not path.stat().st_mode & 0o044 else mode
