"""A recorded release's own code (docs/upgrades.md#releasing): `tests/histories/<version>/source.tar.gz`,
the packages the stack runs as that release shipped them, taken from the repository by the release step.
The upgrade test (tests/upgrade/) unpacks it into a directory of its own and runs it as the previous
release, on this environment's third-party packages.

The archive is reproducible: members sorted, no owners, mtime 0, gzip without a timestamp.
"""

from __future__ import annotations

import gzip
import io
import subprocess
import tarfile
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HISTORIES = ROOT / "tests" / "histories"
# What the stack and the CLI import (pyproject.toml's packages), and pyproject.toml for the version.
RELEASE_PATHS = (
    "pyproject.toml",
    *("activities", "agent", "cli", "core", "gateway", "store", "worker", "workflows"),
)
SOURCE = "source.tar.gz"


def release_files(commit: str | None = None) -> list[tuple[str, bytes]]:
    """The release's files at `commit`, or as the working tree has them (tracked files only)."""
    git = ["git", "-C", str(ROOT)]
    if commit is None:
        tracked = subprocess.run([*git, "ls-files", "--", *RELEASE_PATHS], capture_output=True, check=True)
        names = _lines(tracked)
        return [(name, (ROOT / name).read_bytes()) for name in names if (ROOT / name).is_file()]
    listed = subprocess.run(
        [*git, "ls-tree", "-r", "--name-only", commit, "--", *RELEASE_PATHS], capture_output=True, check=True
    )
    return [
        (name, subprocess.run([*git, "show", f"{commit}:{name}"], capture_output=True, check=True).stdout)
        for name in _lines(listed)
    ]


def _lines(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    return [line for line in done.stdout.decode().splitlines() if line]


def pack_release(files: Iterable[tuple[str, bytes]], archive: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    with open(archive, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as out:
        out.write(buffer.getvalue())


def recorded_sources() -> list[str]:
    """The versions whose code is recorded, oldest first."""
    return sorted(
        (path.parent.name for path in HISTORIES.glob(f"*/{SOURCE}")),
        key=_key,
    )


def previous_release(current: str | None = None) -> str:
    """The release an upgrade to this code starts from: the newest recorded one older than this code's
    version, else (this version is the only one recorded, or the newest, not yet bumped) this version's."""
    from core.version import ferry_version

    current = current or ferry_version()
    recorded = recorded_sources()
    assert recorded, f"no release's code is recorded under {HISTORIES}"
    older = [version for version in recorded if _key(version) < _key(current)]
    return older[-1] if older else recorded[-1]


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def unpack_release(version: str, into: Path) -> Path:
    """The release's packages under `into` (to put first on PYTHONPATH, and to run from)."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(HISTORIES / version / SOURCE) as tar:
        tar.extractall(into, filter="data")
    return into
