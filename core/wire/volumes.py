"""A job's volumes as they travel to its activities (docs/volumes.md), and where each is on its instance.

A job has instance volumes (a directory of the host, `instance_path`) and named volumes (`ferry volume`:
a directory under the agent's data directory, `volumes/<project>/<name>`). Which host path each one is
depends on the instance (its agent's data directory, its user's home), which only the worker knows: the
PREPARE_TASK activity asks `host_path` with the instance's `HostDirs`.
"""

from __future__ import annotations

import posixpath

from pydantic import Field

from core.wire.base import Message

VOLUMES_DIR = "volumes"  # under the agent's data directory


class HostDirs(Message):
    """An instance's directories, as its agent's user sees them: absolute paths on that host."""

    home: str  # `~` in an instance volume's path
    data_dir: str  # the agent's --data-dir; named volumes live under it


class JobVolume(Message):
    """One volume of a job, mounted at `path`: a named volume (`name`, of `project`) or a directory of
    the instance (`instance_path`, `~` for the agent's user's home)."""

    path: str
    name: str | None = None  # interpolated: the name this node uses
    project: str = ""
    instance_path: str | None = None
    optional: bool = False  # an instance volume: the agent creates a missing directory either way


class AttachVolumes(Message):
    """A job takes its named volumes, all or none; refused (VOLUME_ERROR) for a volume that does not exist,
    is on another instance, or is attached to another job."""

    job_submission_id: str
    project: str
    instance_name: str
    names: list[str] = Field(min_length=1)


class DetachVolumes(Message):
    """The job's named volumes free again, once its process has ended (docs/jobs.md#step-5-clean-up)."""

    job_submission_id: str


def volume_dir(data_dir: str, project: str, name: str) -> str:
    """A named volume's directory on its instance."""
    return posixpath.join(data_dir, VOLUMES_DIR, project, name)


def host_path(volume: JobVolume, dirs: HostDirs) -> str:
    """The absolute path on the instance that `volume` is."""
    if volume.name is not None:
        return volume_dir(dirs.data_dir, volume.project, volume.name)
    path = volume.instance_path
    assert path is not None  # a JobVolume is named or an instance's
    if path == "~" or path.startswith("~/"):
        return posixpath.normpath(dirs.home + path[1:])
    return path


def named_volumes(volumes: list[JobVolume]) -> list[str]:
    """The names of a job's named volumes, in order, each once."""
    return list(dict.fromkeys(volume.name for volume in volumes if volume.name is not None))
