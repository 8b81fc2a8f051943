"""Code archives kept by the agent under `<data_dir>/code/<sha256>.tar.gz`, each received and checked once
(agent/code.py) however many tasks run it: an array's elements all do (docs/jobs.md#batches).

A task takes its archive as a hard link (the same file system: no copy), extracted and unlinked at its
start as an uploaded one is. The cache keeps the KEPT archives used last (each use touches its file), and
no more than KEPT_BYTES of them but the last, and removes the others as a new one comes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

from agent.code import receive_archive

KEPT = 16
KEPT_BYTES = 2**30  # a repository's archive may be large: the cache stays within a GiB but for the last


class CodeCache:
    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "code"

    def path(self, sha256: str) -> Path:
        return self.root / f"{sha256.lower()}.tar.gz"

    def has(self, sha256: str) -> bool:
        return self.path(sha256).exists()

    async def receive(self, chunks: AsyncIterator[bytes], sha256: str) -> None:
        """Keeps the upload, checked against `sha256` (CodeArchiveError if it is not that, or unsafe)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        await receive_archive(chunks, self.path(sha256), sha256)
        self._evict()

    def link_into(self, sha256: str, destination: Path) -> bool:
        """The kept archive at `destination` (a task's); False if it is not kept."""
        source = self.path(sha256)
        try:
            os.utime(source)  # used now: the last to go
        except FileNotFoundError:
            return False
        destination.unlink(missing_ok=True)
        try:
            os.link(source, destination)
        except FileNotFoundError:
            return False  # evicted meanwhile
        except OSError:  # a file system without hard links
            shutil.copyfile(source, destination)
        return True

    def _evict(self) -> None:
        kept = sorted(((_stat(path), path) for path in self.root.glob("*.tar.gz")), reverse=True)
        total = 0
        for position, ((_, size), path) in enumerate(kept):
            total += size
            if position >= KEPT or (position > 0 and total > KEPT_BYTES):
                path.unlink(missing_ok=True)


def _stat(path: Path) -> tuple[float, int]:
    """When it was last used, and its size (0, 0 if it is gone)."""
    try:
        found = path.stat()
    except FileNotFoundError:
        return 0.0, 0
    return found.st_mtime, found.st_size
