"""Volumes for the process executor, which has no mount namespace: a job sees a host path through a link.

A relative mount path is linked inside the job's workdir. An absolute one is linked where it is asked
for, if that path is free and the agent may create it; an existing path is accepted only when it already
is the host path or a link to it. Links the agent made are removed when the task ends.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.wire.agent_api import VolumeMount


class VolumeError(Exception):
    pass


def link_volumes(volumes: list[VolumeMount], workdir: Path) -> list[str]:
    """Make every volume visible at its mount path; return the links made. Raise VolumeError if one can't."""
    made: list[str] = []
    try:
        for volume in volumes:
            link = _link_volume(volume, workdir)
            if link is not None:
                made.append(link)
    except VolumeError:
        unlink_paths(made)
        raise
    return made


def _link_volume(volume: VolumeMount, workdir: Path) -> str | None:
    host_path = Path(volume.host_path)
    if not host_path.is_absolute():
        raise VolumeError(f"volume host path must be absolute, got {volume.host_path!r}")
    try:
        host_path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VolumeError(f"cannot create volume host path {host_path}: {exc}") from exc
    target = workdir / volume.path  # an absolute mount path replaces the workdir
    if target.is_symlink() and Path(os.readlink(target)) == host_path:
        return None
    if target.exists():
        if target.resolve() == host_path.resolve():
            return None
        raise VolumeError(f"cannot mount {host_path} at {target}: the path exists and is something else")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(host_path, target_is_directory=True)
    except OSError as exc:
        raise VolumeError(f"cannot mount {host_path} at {target}: {exc}") from exc
    return str(target)


def unlink_paths(paths: list[str]) -> None:
    for path in paths:
        try:
            if Path(path).is_symlink():
                os.unlink(path)
        except OSError:
            pass  # already gone, or replaced by the job: nothing of ours to clean
