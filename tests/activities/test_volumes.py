"""The attach and detach activities over a real store (docs/volumes.md): a refusal is VOLUME_ERROR, not
retried, naming the volume; both repeat harmlessly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.volumes import VolumeActivities
from core.wire.volumes import AttachVolumes, DetachVolumes
from store import Store, VolumeRecord, open_store
from store.volume_repository import volume_id


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite:///{tmp_path / 'ferry.db'}")
    opened.create_volume(
        VolumeRecord(id=volume_id("p", "data"), project="p", name="data", fleet="local", instance="local")
    )
    yield opened
    opened.engine.dispose()


def attach(job: str, *names: str) -> AttachVolumes:
    return AttachVolumes(job_submission_id=job, project="p", instance_name="local", names=list(names))


async def test_attach_detach_and_the_refusal_of_a_second_job(store: Store) -> None:
    activities, env = VolumeActivities(store), ActivityEnvironment()
    await env.run(activities.attach_volumes, attach("job-a", "data"))
    await env.run(activities.attach_volumes, attach("job-a", "data"))  # a retry finds it done
    with pytest.raises(ApplicationError) as refused:
        await env.run(activities.attach_volumes, attach("job-b", "data"))
    assert (refused.value.type, refused.value.non_retryable) == ("VOLUME_ERROR", True)
    assert refused.value.message == "volume data is attached to job job-a"
    await env.run(activities.detach_volumes, DetachVolumes(job_submission_id="job-a"))
    await env.run(activities.detach_volumes, DetachVolumes(job_submission_id="job-a"))
    await env.run(activities.attach_volumes, attach("job-b", "data"))
    stored = store.get_volume("p", "data")
    assert stored is not None and stored.attached_to == "job-b"


async def test_a_volume_that_does_not_exist_is_named(store: Store) -> None:
    with pytest.raises(ApplicationError, match="volume nope does not exist in project 'p'") as refused:
        await ActivityEnvironment().run(
            VolumeActivities(store).attach_volumes, attach("job-a", "data", "nope")
        )
    assert refused.value.type == "VOLUME_ERROR"
    stored = store.get_volume("p", "data")
    assert stored is not None and stored.attached_to is None  # none of them, then
