"""The elements' activities (activities/elements.py) on real agents: an agent of this release takes a
shard's starts and removals in batches; the previous release's agent, which has no batch routes, takes the
same elements one by one (docs/jobs.md#batches, docs/upgrades.md)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from agent_harness import AgentProcess, new_id, start_agent, stop_agent, wait_terminated
from temporalio.testing import ActivityEnvironment
from test_agent_api import make_archive
from test_previous_release_agent import start_previous_agent

from activities.agent_client import AgentClient
from activities.elements import ElementActivities
from activities.instances import InstanceDirectory
from activities.jobs import JobActivities
from core.wire.agent_api import JobSpec, Resources
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


@dataclass
class Stack:
    """An agent of this release or the previous one, the worker's job steps in front of it, a store that
    keeps a code archive of one file, `element.txt`."""

    this: bool
    agent: AgentProcess
    client: AgentClient
    jobs: JobActivities
    code_hash: str


@contextlib.asynccontextmanager
async def stack(tmp_path: Path, release: str, text: bytes) -> AsyncIterator[Stack]:
    this = release == "this"
    agent: AgentProcess = start_agent(tmp_path / "agent") if this else start_previous_agent(tmp_path)
    store = open_store(f"sqlite:///{tmp_path / 'ferry.db'}")
    try:
        async with agent.client() as client:
            instances = InstanceDirectory()
            instances.add("local", client)
            code_hash = store.put_code(make_archive({"element.txt": text}))
            yield Stack(this, agent, client, JobActivities(instances, store), code_hash)
    finally:
        stop_agent(agent)
        store.engine.dispose()


@pytest.mark.parametrize("release", ["this", "previous"])
async def test_a_shards_elements_start_and_are_removed_on_either_release_of_the_agent(
    tmp_path: Path, release: str
) -> None:
    ids = [new_id("el") for _ in range(5)]
    async with stack(tmp_path, release, b"an element\n") as on:
        client = on.client
        elements = ElementActivities(on.jobs)
        if on.this:  # every element in the batch: none taken alone
            elements._start = elements._remove = None  # type: ignore[assignment,method-assign]
        started = await ActivityEnvironment().run(
            elements.start_many, StartMany(steps=[step(task_id, on.code_hash) for task_id in ids])
        )
        assert [(r.job_submission_id, r.failure) for r in started.results] == [(i, None) for i in ids]
        assert client.takes_batches is on.this
        kept = on.agent.data_dir / "code" / f"{on.code_hash.removeprefix('sha256:')}.tar.gz"
        assert kept.exists() is on.this
        for task_id in ids:
            ended = await wait_terminated(client, task_id)
            assert (ended.exit_status, (await client.pull(task_id)).log_bytes()) == (0, b"an element\n")
        refs = [TaskRef(job_submission_id=task_id, instance_name="local") for task_id in ids]
        removed = await ActivityEnvironment().run(elements.remove_many, RemoveMany(refs=refs))
        assert removed.problems == [None] * len(ids)
        assert not {t.id for t in await client.list_tasks()} & set(ids)


@pytest.mark.parametrize("release", ["this", "previous"])
async def test_a_jobs_start_is_a_batch_of_one_on_this_release_and_its_own_steps_on_the_previous(
    tmp_path: Path, release: str
) -> None:
    task_id = new_id("job")
    async with stack(tmp_path, release, b"a job\n") as on:
        if on.this:  # one request: the steps of its own are not taken
            on.jobs._prepare = None  # type: ignore[assignment,method-assign]
        await ActivityEnvironment().run(on.jobs.prepare_and_start, step(task_id, on.code_hash))
        ended = await wait_terminated(on.client, task_id)
        assert (ended.exit_status, (await on.client.pull(task_id)).log_bytes()) == (0, b"a job\n")
