"""A job's named volumes in the store (docs/volumes.md): attached once it is placed, detached at its end.

The attachment is the store's (store.volume_repository): one job at a time, all of a job's volumes or
none. Both activities are idempotent: attaching again for the same job, or detaching twice, changes
nothing. The volume's directory itself is the agent's to make (it creates a missing host path).
"""

from __future__ import annotations

import asyncio
import time

from temporalio import activity
from temporalio.exceptions import ApplicationError

from core.status import JobTerminationReason
from core.wire import activity_names as names
from core.wire.volumes import AttachVolumes, DetachVolumes
from store import Store


class VolumeActivities:
    def __init__(self, store: Store) -> None:
        self._store = store

    @activity.defn(name=names.ATTACH_VOLUMES)
    async def attach_volumes(self, request: AttachVolumes) -> None:
        """The job's volumes attached to it; VOLUME_ERROR (not retried) naming the volume that cannot be."""
        refused = await asyncio.to_thread(
            self._store.attach_volumes,
            request.project,
            request.names,
            request.job_submission_id,
            request.instance_name,
            time.time(),
        )
        if refused is not None:
            raise ApplicationError(refused, type=JobTerminationReason.VOLUME_ERROR.name, non_retryable=True)

    @activity.defn(name=names.DETACH_VOLUMES)
    async def detach_volumes(self, request: DetachVolumes) -> None:
        """Every volume the job holds, free again."""
        detached = await asyncio.to_thread(self._store.detach_volumes, request.job_submission_id)
        if detached:
            activity.logger.info("%s detached %s", request.job_submission_id, ", ".join(detached))
