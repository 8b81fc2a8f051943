"""An array's tasks started and removed in batches on a real agent (docs/jobs.md#batches): one request for
many tasks, each answered on its own as its own requests would have been, the code kept once per agent."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agent_harness import new_id, pull_all, wait_terminated
from test_agent_api import make_archive

from activities.agent_client import AgentClient, AgentError
from agent import code_cache
from agent.code_cache import KEPT, CodeCache
from agent.instance import HostCapacity
from agent.tasks import TaskConflict, TaskRegistry
from core.wire.agent_api import JobSpec, Resources, TaskStatus, TaskSubmitRequest
from core.wire.agent_batches import StartBatch, TaskStart


def start(task_id: str, commands: list[str], code_hash: str | None = None, **resources: float) -> TaskStart:
    return TaskStart(
        submit=TaskSubmitRequest(id=task_id, resources=Resources(**resources)),
        spec=JobSpec(run_name="array", commands=commands),
        code_hash=code_hash,
    )


async def test_a_batch_starts_each_task_with_the_kept_code_and_answers_each(client: AgentClient) -> None:
    archive = make_archive({"element.txt": b"from the kept archive\n"})
    sha = hashlib.sha256(archive).hexdigest()
    await client.keep_code(archive, sha)
    await client.keep_code(archive, sha)  # kept: not sent again
    ids = [new_id("el") for _ in range(3)]
    taken = new_id("taken")
    await client.submit_task(TaskSubmitRequest(id=taken, resources=Resources(memory=0.001)))
    batch = StartBatch(
        tasks=[
            start(ids[0], ["cat element.txt"], sha),
            start(ids[1], ["cat element.txt; exit 3"], sha),
            start(taken, ["true"]),  # the same id, another request: refused alone
            start(ids[2], ["true"], "f" * 64),  # code the agent does not keep
        ]
    )
    answers = await client.start_batch(batch)
    assert [a.id for a in answers] == [ids[0], ids[1], taken, ids[2]]
    assert [a.status_code for a in answers] == [200, 200, 409, 400]
    assert answers[2].message is not None and "different request" in answers[2].message
    assert answers[3].message == f"code {'f' * 64} is not kept on this agent"
    for answer in answers[:2]:
        assert answer.task is not None and answer.task.status in (TaskStatus.RUNNING, TaskStatus.TERMINATED)
    log, _ = await pull_all(client, ids[0])
    assert log == b"from the kept archive\n"
    assert (await wait_terminated(client, ids[1])).exit_status == 3
    # Sent again (a retried activity): each answered as it now is, nothing started twice.
    again = await client.start_batch(StartBatch(tasks=batch.tasks[:2]))
    assert [(a.status_code, a.task and a.task.status) for a in again] == [(200, TaskStatus.TERMINATED)] * 2
    assert (await client.get_task(ids[0])).started_at == answers[0].task.started_at  # type: ignore[union-attr]


async def test_a_removal_batch_removes_the_ended_and_answers_the_others(client: AgentClient) -> None:
    ended, running, unknown = new_id("ended"), new_id("running"), new_id("unknown")
    await client.start_batch(StartBatch(tasks=[start(ended, ["true"]), start(running, ["sleep 30"])]))
    await wait_terminated(client, ended)
    answers = await client.remove_batch([ended, running, unknown])
    assert [a.status_code for a in answers] == [200, 409, 404]
    with pytest.raises(AgentError) as gone:
        await client.get_task(ended)
    assert gone.value.status_code == 404
    assert (await client.get_task(running)).status == TaskStatus.RUNNING
    await client.terminate(running, timeout=0)
    await wait_terminated(client, running)
    assert [a.status_code for a in await client.remove_batch([running])] == [200]


async def test_code_that_is_not_its_hash_is_not_kept(client: AgentClient) -> None:
    archive = make_archive({"a": b"b"})
    with pytest.raises(AgentError) as refused:
        await client.keep_code(archive, "0" * 64)
    assert refused.value.status_code == 400 and "sha256 mismatch" in refused.value.message
    assert "0" * 64 not in client.kept_code


async def test_the_cache_keeps_the_archives_used_last(tmp_path: Path) -> None:
    cache = CodeCache(tmp_path)
    shas = []
    for index in range(KEPT + 2):
        archive = make_archive({"n": str(index).encode()})
        sha = hashlib.sha256(archive).hexdigest()
        shas.append(sha)

        async def chunks(data: bytes = archive) -> AsyncIterator[bytes]:
            yield data

        await cache.receive(chunks(), sha)
        time.sleep(0.01)  # distinct modification times
        if index == 0:
            first = sha
        if index == KEPT - 1:
            assert cache.link_into(first, tmp_path / "task.tar.gz")  # used: kept past the others
            time.sleep(0.01)
    assert cache.has(first) and (tmp_path / "task.tar.gz").exists()
    assert not cache.has(shas[1]) and not cache.has(shas[2])
    assert all(cache.has(sha) for sha in shas[3:])
    assert not cache.link_into(shas[1], tmp_path / "other.tar.gz")


async def test_the_cache_stays_within_its_bytes_but_for_the_archive_it_just_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(code_cache, "KEPT_BYTES", 1000)
    cache = CodeCache(tmp_path)
    shas = []
    for index in range(3):
        archive = make_archive({"n": os.urandom(600 + index)})  # about 800 bytes: random data stays large
        sha = hashlib.sha256(archive).hexdigest()
        shas.append(sha)

        async def chunks(data: bytes = archive) -> AsyncIterator[bytes]:
            yield data

        await cache.receive(chunks(), sha)
        time.sleep(0.01)
        assert [cache.has(s) for s in shas] == [False] * index + [True]


def test_a_task_being_written_holds_its_id_and_gives_back_what_it_took_if_abandoned(tmp_path: Path) -> None:
    """A batch's new task is listed only once its record is on disk (agent/batches.py): meanwhile its id
    is refused to another submission, and a record that could not be written frees its resources."""
    registry = TaskRegistry(tmp_path, HostCapacity(cpus=4, memory_bytes=8 * 2**30), [])
    registry.load()
    request = TaskSubmitRequest(id="element", resources=Resources(cpu=4))
    record = registry.new_record(request)
    assert registry.find("element") is None and registry.ledger.free().cpu == 0
    with pytest.raises(TaskConflict, match="being submitted"):
        registry.submit(request)
    registry.abandon(record)
    assert registry.ledger.free().cpu == 4 and not (tmp_path / "tasks" / "element").exists()
    assert registry.submit(request).status == TaskStatus.PENDING
    assert (tmp_path / "tasks" / "element" / "task.json").exists()


async def test_two_tasks_of_a_batch_on_the_hosts_network_cannot_share_a_port(client: AgentClient) -> None:
    first, second = new_id("port"), new_id("port")
    tasks = [start(task_id, ["sleep 30"]) for task_id in (first, second)]
    for task in tasks:
        task.submit.ports, task.submit.network = [47213], "host"
    answers = await client.start_batch(StartBatch(tasks=tasks))
    assert [a.status_code for a in answers] == [200, 409]
    assert answers[1].message == f"port 47213 is already used by task {first!r}"
    await client.terminate(first, timeout=0)
    await wait_terminated(client, first)
