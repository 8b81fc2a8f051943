"""The job's code: a tar.gz uploaded with its sha256, checked, and extracted into the task's workdir.

Extraction follows tarfile's `data` filter: leading slashes stripped, nothing outside the workdir, no
link to an absolute path or out of the workdir, no device or FIFO, no setuid bits, no owners. Pythons
that have the filter (3.12, and 3.11.4 on) use it; older ones, such as Debian 12's 3.11.2 or Ubuntu
22.04's 3.10 on an SSH host (docs/fleets.md#ssh-fleets), use `_data_member` below, the same rules.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

_HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


class CodeArchiveError(Exception):
    """The archive is not what was announced, or cannot be extracted safely."""


class UnsafeMember(Exception):
    """A member the `data` filter refuses; the message names it and says why."""


# What refuses a member: tarfile's filter raises its FilterError, the agent's own checks UnsafeMember.
_REFUSED: tuple[type[Exception], ...] = (UnsafeMember,)
if _HAS_DATA_FILTER:
    _REFUSED += (tarfile.FilterError,)


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
                _data_member(member, "/nonexistent-root")
    except UnsafeMember as exc:
        raise CodeArchiveError(f"unsafe code archive: {exc}") from exc
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CodeArchiveError(f"not a readable tar.gz archive: {_one_line(exc)}") from exc
    except Exception as exc:  # whatever else: an answer to the upload, never a hung job
        raise CodeArchiveError(f"could not check the code archive: {_one_line(exc)}") from exc


def extract_archive(archive: Path, workdir: Path) -> None:
    """Extract by the `data` filter's rules: tarfile's own where it has it, else `_data_member`'s."""
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            if _HAS_DATA_FILTER:
                tar.extractall(workdir, filter="data")
            else:
                extract_checked(tar, workdir)
    except _REFUSED as exc:
        raise CodeArchiveError(f"unsafe code archive: {exc}") from exc
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CodeArchiveError(f"could not extract the code archive: {_one_line(exc)}") from exc
    except Exception as exc:
        raise CodeArchiveError(f"could not extract the code archive: {_one_line(exc)}") from exc


def extract_checked(tar: tarfile.TarFile, workdir: Path) -> None:
    """Member by member, each checked against what is on disk by then (a link extracted earlier is
    followed, as the `data` filter does); directories' modes are set last, as `extractall` does."""
    checked: dict[str, str] = {"filter": "fully_trusted"} if _HAS_DATA_FILTER else {}  # tests: both paths
    directories: list[tarfile.TarInfo] = []
    for member in tar:
        safe = _data_member(member, str(workdir))
        if safe.isdir():
            directories.append(safe)
            safe = copy.copy(safe)
            safe.mode = 0o700  # writable until its members are in
        tar.extract(safe, workdir, set_attrs=not safe.isdir(), **checked)  # type: ignore[arg-type]
    for directory in sorted(directories, key=lambda d: d.name, reverse=True):
        path = os.path.join(workdir, directory.name)
        tar.utime(directory, path)
        tar.chmod(directory, path)


def _data_member(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo:
    """The member as tarfile's `data` filter would extract it (a copy), or UnsafeMember."""
    dest = os.path.realpath(destination)
    name = member.name.lstrip("/" + os.sep)
    if os.path.isabs(name):
        raise UnsafeMember(f"member {member.name!r} has an absolute path")
    target = os.path.realpath(os.path.join(dest, name))
    if not _inside(target, dest):
        raise UnsafeMember(f"{member.name!r} would be extracted to {target!r}, {_OUTSIDE}")
    if not (member.isreg() or member.islnk() or member.isdir() or member.issym()):
        raise UnsafeMember(f"{member.name!r} is a special file")
    if member.islnk() or member.issym():
        if os.path.isabs(member.linkname):
            raise UnsafeMember(f"{member.name!r} is a link to an absolute path")
        base = os.path.join(dest, os.path.dirname(name)) if member.issym() else dest
        target = os.path.realpath(os.path.join(base, member.linkname))
        if not _inside(target, dest):
            raise UnsafeMember(f"{member.name!r} would link to {target!r}, {_OUTSIDE}")
    safe = copy.copy(member)
    safe.name = name
    mode = member.mode & 0o755  # no setuid, setgid or sticky bit; nobody else may write
    if member.isreg() or member.islnk():
        mode = (mode if mode & 0o100 else mode & ~0o111) | 0o600
    elif member.isdir():
        mode |= 0o700
    # No owners: files belong to whoever extracts them (tarfile looks the empty names up in vain).
    safe.mode, safe.uid, safe.gid, safe.uname, safe.gname = mode, os.geteuid(), os.getegid(), "", ""
    return safe


_OUTSIDE = "which is outside the destination"  # tarfile's words, so both ways refuse alike


def _inside(real_path: str, dest: str) -> bool:
    return os.path.commonpath([real_path, dest]) == dest


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
