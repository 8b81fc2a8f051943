"""The job's code: a tar.gz uploaded with its sha256, checked, and extracted into the task's workdir."""

from __future__ import annotations

import asyncio
import hashlib
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path


class CodeArchiveError(Exception):
    """The archive is not what was announced, or cannot be extracted safely."""


async def receive_archive(chunks: AsyncIterator[bytes], destination: Path, expected_sha256: str) -> str:
    """Stream an upload to `destination`, hashing as it goes; refuse it if the hash differs."""
    digest = hashlib.sha256()
    tmp = destination.with_name(destination.name + ".part")
    with open(tmp, "wb") as out:
        async for chunk in chunks:
            digest.update(chunk)
            out.write(chunk)
    actual = digest.hexdigest()
    if actual != expected_sha256.lower():
        tmp.unlink(missing_ok=True)
        raise CodeArchiveError(f"code archive sha256 mismatch: expected {expected_sha256}, got {actual}")
    try:
        await asyncio.to_thread(check_archive, tmp)  # it decompresses the whole archive
    except CodeArchiveError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, destination)
    return actual


def check_archive(path: Path) -> None:
    """Read the archive's index so that a corrupt or unsafe archive is refused at upload, not at run."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar.getmembers():
                tarfile.data_filter(member, "/nonexistent-root")
    except tarfile.FilterError as exc:
        raise CodeArchiveError(f"unsafe code archive: {exc}") from exc
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CodeArchiveError(f"not a readable tar.gz archive: {exc}") from exc


def extract_archive(archive: Path, workdir: Path) -> None:
    """Extract with tarfile's `data` filter: no absolute paths, no `..`, no links or devices leading out."""
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(workdir, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CodeArchiveError(f"could not extract the code archive: {exc}") from exc
