"""The elements' activities (activities/elements.py) on real agents: an agent of this release takes a
shard's starts and removals in batches; the previous release's agent, which has no batch routes, takes the
same elements one by one (docs/jobs.md#batches, docs/upgrades.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_harness import AgentProcess, new_id, start_agent, stop_agent, wait_terminated
from temporalio.testing import ActivityEnvironment
from test_agent_api import make_archive
from test_previous_release_agent import start_previous_agent

from activities.elements import ElementActivities
from activities.instances import InstanceDirectory
from activities.jobs import JobActivities
from core.wire.agent_api import JobSpec, Resources, TaskStatus
from core.wire.element_messages import RemoveMany, StartMany
from core.wire.messages import PrepareAndStart, PrepareTask, StartJobRequest, TaskRef
from store import open_store


def step(task_id: str, code_hash: str) -> PrepareAndStart:
    return PrepareAndStart(
        prepare=PrepareTask(
            job_submission_id=task_id, instance_name="local", task_name=task_id, resources=Resources()
        ),
        start=StartJobRequest(
            job_submission_id=task_id,
            instance_name="local",
            spec=JobSpec(run_name="array", commands=["cat element.txt"]),
            code_hash=code_hash,
            api_access=False,
        ),
    )


@pytest.mark.parametrize("release", ["this", "previous"])
async def test_a_shards_elements_start_and_are_removed_on_either_release_of_the_agent(
    tmp_path: Path, release: str
) -> None:
    this = release == "this"
    agent: AgentProcess = start_agent(tmp_path / "agent") if this else start_previous_agent(tmp_path)
    store = open_store(f"sqlite:///{tmp_path / 'ferry.db'}")
    code_hash = store.put_code(make_archive({"element.txt": b"an element\n"}))
    ids = [new_id("el") for _ in range(5)]
    try:
        async with agent.client() as client:
            instances = InstanceDirectory()
            instances.add("local", client)
            elements = ElementActivities(JobActivities(instances, store))
            if this:  # every element in the batch: none taken alone
                elements._start = elements._remove = None  # type: ignore[assignment,method-assign]
            started = await ActivityEnvironment().run(
                elements.start_many, StartMany(steps=[step(task_id, code_hash) for task_id in ids])
            )
            assert [(r.job_submission_id, r.failure) for r in started.results] == [(i, None) for i in ids]
            assert client.takes_batches is this
            kept = agent.data_dir / "code" / f"{code_hash.removeprefix('sha256:')}.tar.gz"
            assert kept.exists() is this
            for task_id in ids:
                ended = await wait_terminated(client, task_id)
                assert (ended.exit_status, (await client.pull(task_id)).log_bytes()) == (0, b"an element\n")
            refs = [TaskRef(job_submission_id=task_id, instance_name="local") for task_id in ids]
            removed = await ActivityEnvironment().run(elements.remove_many, RemoveMany(refs=refs))
            assert removed.problems == [None] * len(ids)
            assert [t.id for t in await client.list_tasks() if t.status != TaskStatus.TERMINATED] == []
            assert not {t.id for t in await client.list_tasks()} & set(ids)
    finally:
        stop_agent(agent)
        store.engine.dispose()


@pytest.mark.parametrize("release", ["this", "previous"])
async def test_a_jobs_start_is_a_batch_of_one_on_this_release_and_its_own_steps_on_the_previous(
    tmp_path: Path, release: str
) -> None:
    this = release == "this"
    agent: AgentProcess = start_agent(tmp_path / "agent") if this else start_previous_agent(tmp_path)
    store = open_store(f"sqlite:///{tmp_path / 'ferry.db'}")
    code_hash = store.put_code(make_archive({"element.txt": b"a job\n"}))
    task_id = new_id("job")
    try:
        async with agent.client() as client:
            instances = InstanceDirectory()
            instances.add("local", client)
            jobs = JobActivities(instances, store)
            if this:  # one request: the steps of its own are not taken
                jobs._prepare = None  # type: ignore[assignment,method-assign]
            await ActivityEnvironment().run(jobs.prepare_and_start, step(task_id, code_hash))
            ended = await wait_terminated(client, task_id)
            assert (ended.exit_status, (await client.pull(task_id)).log_bytes()) == (0, b"a job\n")
    finally:
        stop_agent(agent)
        store.engine.dispose()
