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

import pathspec

from core.configuration.code_sources import FileMapping, RepoSpec, code_path, code_repo

ALWAYS_IGNORED = [".git/", ".venv/", "__pycache__/", "*.pyc"]
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


def repo_id(root: Path) -> str:
    """The code's name in the job's `FERRY_REPO_ID`/`DSTACK_REPO_ID`: its directory's name, made a slug, and a
    short hash of where it is on the user's machine (two `app` directories differ), as dstack names one."""
    slug = re.sub(r"[^a-z0-9]+", "-", root.name.lower()).strip("-") or "repo"
    return f"{slug[:40]}-{hashlib.sha256(str(root).encode()).hexdigest()[:8]}"


class MissingCodeSource(ValueError):
    """A repo or a file the configuration names is not on this machine."""


def code_sources(
    config_dir: Path, repos: list[RepoSpec], files: list[FileMapping], working_dir: str | None
) -> tuple[Path, list[tuple[Path, str]]]:
    """The directory sent as the job's code, and the files added to it (each at its path in the code), as
    the configuration's `repos` and `files` ask (docs/runs.md#code); what Ferry cannot place is left out
    (the warning line names it). MissingCodeSource for a local path that is not there."""
    local = code_repo(repos)
    root = (config_dir / local).resolve() if local is not None else config_dir
    if not root.is_dir():
        raise MissingCodeSource(f"repos: {local}: no such directory ({root})")
    extra = []
    for mapping in files:
        target = code_path(mapping, working_dir)
        source = (config_dir / Path(mapping.local_path).expanduser()).resolve()
        if target is None:
            continue
        if not source.exists():
            raise MissingCodeSource(f"files: {mapping.local_path}: no such file or directory ({source})")
        extra.append((source, target))
    return root, extra


def pack_repo(root: Path, extra: list[tuple[Path, str]] | None = None) -> bytes:
    """The archive of `root`'s files, and of each `extra` file or directory at its path (over `root`'s)."""
    entries = {rel.as_posix(): root / rel for rel in repo_files(root)}
    for source, target in extra or []:
        if source.is_dir():
            entries.update({f"{target}/{rel.as_posix()}": source / rel for rel in repo_files(source)})
        else:
            entries[target] = source
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name in sorted(entries):
            path = entries[name]
            info = tarfile.TarInfo(name)
            info.size = path.stat().st_size
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    return buffer.getvalue()
