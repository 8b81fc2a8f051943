"""Packing a configuration's repo directory into a reproducible tar.gz, honouring `.gitignore`.

The same files give the same bytes (sorted entries, zeroed times and owners), so the archive's hash
addresses it in the store and an unchanged repo is stored once.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import pathspec

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


def pack_repo(root: Path) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for rel in repo_files(root):
            path = root / rel
            info = tarfile.TarInfo(rel.as_posix())
            info.size = path.stat().st_size
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    return buffer.getvalue()
