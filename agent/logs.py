"""A job's log, read by byte offset: the file only grows, so an offset names the same bytes forever."""

from __future__ import annotations

import os
from pathlib import Path


class OffsetOutOfRange(Exception):
    pass


def log_size(path: str | Path) -> int:
    """0 for a log not written yet. A path given as a string costs a stat alone (agent/changes.py keeps
    them so: 10,000 quiet jobs are 10,000 looks a second)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def read_log(path: Path, offset: int, limit: int) -> tuple[bytes, int]:
    """Up to `limit` bytes from `offset`, and the size of the log when read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        if offset > 0:
            raise OffsetOutOfRange(f"offset {offset} is beyond the end of the log (0 bytes)") from None
        return b"", 0
    try:
        size = os.fstat(fd).st_size
        if offset > size:
            raise OffsetOutOfRange(f"offset {offset} is beyond the end of the log ({size} bytes)")
        return os.pread(fd, min(limit, size - offset), offset), size
    finally:
        os.close(fd)
