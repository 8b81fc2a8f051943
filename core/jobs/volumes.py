"""A job's named volumes (docs/volumes.md): what it attaches once placed, and detaches at its end."""

from __future__ import annotations

from core.wire.job_messages import JobInput
from core.wire.volumes import AttachVolumes, DetachVolumes, named_volumes


def attach_request(inp: JobInput, job_id: str, instance: str) -> AttachVolumes | None:
    """The job's named volumes, taken on the instance it was placed on; None when it names none."""
    names = named_volumes(inp.volumes)
    if not names:
        return None
    return AttachVolumes(job_submission_id=job_id, project=inp.project, instance_name=instance, names=names)


def detach_request(inp: JobInput, job_id: str) -> DetachVolumes | None:
    """What frees the job's named volumes at its end; None when it names none (nothing to detach)."""
    return DetachVolumes(job_submission_id=job_id) if named_volumes(inp.volumes) else None
