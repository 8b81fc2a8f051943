"""The worker's instance watch (activities/instance_watch.py, docs/jobs.md#the-instance-watch) against a
real agent and a real store: logs stored whole before a job hears its end, one word per ended task, a
silent agent's jobs told INSTANCE_UNREACHABLE, a watch started again telling again what is not removed.

The watch runs in the SDK's ActivityEnvironment; its Temporal client is a recorder of the signals it sends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentProcess, new_id, start_agent, start_job, stop_agent, wait_healthy
from temporalio.testing import ActivityEnvironment

from activities.instance_watch import InstanceWatchActivities
from activities.instances import InstanceDirectory
from core.status import JobTerminationReason
from core.wire.messages import TASK_ENDED, JobOutcome, WatchInstance
from store import Store, open_store

PROJECT = "ferry/main/"


@dataclass
class Signals:
    """A Temporal client as the watch uses it: every signal it sends, by workflow id."""

    sent: dict[str, list[JobOutcome]] = field(default_factory=dict)
    stored_when_told: dict[str, int] = field(default_factory=dict)
    store: Store | None = None

    def get_workflow_handle(self, workflow_id: str) -> Any:
        signals = self

        class Handle:
            async def signal(self, name: str, outcome: JobOutcome) -> None:
                assert name == TASK_ENDED
                if signals.store is not None:  # what the store had when the job heard its end
                    task_id = workflow_id.rsplit("/", 1)[-1]
                    signals.stored_when_told[task_id] = signals.store.log_size(task_id)
                signals.sent.setdefault(workflow_id, []).append(outcome)

        return Handle()

    async def until(self, owner: str, timeout: float = 30.0) -> JobOutcome:
        deadline = time.monotonic() + timeout
        while owner not in self.sent:
            assert time.monotonic() < deadline, f"{owner} was not told within {timeout}s"
            await asyncio.sleep(0.05)
        return self.sent[owner][0]


@dataclass
class Watching:
    agent: AgentProcess
    store: Store
    signals: Signals
    instances: InstanceDirectory
    env: ActivityEnvironment

    activities: InstanceWatchActivities | None = None

    def start(self, unreachable_after: float = 10.0) -> asyncio.Task[None]:
        """A watch, on this worker's activities (the same for every watch of the test)."""
        if self.activities is None:
            self.activities = InstanceWatchActivities(self.instances, self.store, self.signals)  # type: ignore[arg-type]
        activities = self.activities
        request = WatchInstance(instance_name="local", owners=PROJECT, unreachable_after=unreachable_after)
        return asyncio.create_task(self.env.run(activities.watch_instance, request))


@pytest.fixture
async def watching(tmp_path: Path) -> AsyncIterator[Watching]:
    agent = start_agent(tmp_path / "agent")
    store = open_store(f"sqlite:///{tmp_path}/ferry.db")
    instances = InstanceDirectory()
    instances.add("local", agent.client())
    try:
        yield Watching(agent, store, Signals(store=store), instances, ActivityEnvironment())
    finally:
        await instances.aclose()
        stop_agent(agent)


def owner_of(task_id: str, project: str = PROJECT) -> str:
    return f"{project}run/{task_id}"


async def stopped(watch: asyncio.Task[None], env: ActivityEnvironment) -> None:
    env.cancel()
    with pytest.raises(asyncio.CancelledError):  # the activity ends cancelled
        await asyncio.wait_for(watch, 10)


async def test_each_job_hears_its_end_once_with_its_whole_log_stored(watching: Watching) -> None:
    watch = watching.start()
    ids = [new_id("a"), new_id("b"), new_id("other")]
    async with watching.agent.client() as client:
        # a: a megabyte and a half in one burst, then exit 3; b: paced lines, exit 0; other: another
        # project's job, which this watch leaves alone.
        await start_job(
            client,
            ["head -c 1500000 /dev/zero | tr '\\0' x", "exit 3"],
            task_id=ids[0],
            task_fields={"owner": owner_of(ids[0])},
        )
        await start_job(
            client,
            ["for i in 1 2 3 4 5; do echo line $i; sleep 0.1; done"],
            task_id=ids[1],
            task_fields={"owner": owner_of(ids[1])},
        )
        await start_job(
            client, ["echo theirs"], task_id=ids[2], task_fields={"owner": f"ferry/x/run/{ids[2]}"}
        )
        failed = await watching.signals.until(owner_of(ids[0]))
        done = await watching.signals.until(owner_of(ids[1]))
        await asyncio.sleep(1.0)  # time for a second word, were one to come
    await stopped(watch, watching.env)
    assert (failed.termination_reason, failed.exit_status) == (
        JobTerminationReason.CONTAINER_EXITED_WITH_ERROR,
        3,
    )
    assert (done.termination_reason, done.exit_status) == (JobTerminationReason.DONE_BY_RUNNER, 0)
    assert (failed.task_id, done.task_id) == (ids[0], ids[1])  # a job hears its own task's end only
    assert watching.signals.stored_when_told[ids[0]] == 1_500_000
    assert watching.store.read_log(ids[0])[0] == b"x" * 1_500_000
    lines = b"".join(b"line %d\n" % i for i in range(1, 6))
    assert watching.store.read_log(ids[1])[0] == lines
    assert watching.signals.stored_when_told[ids[1]] == len(lines)
    assert [len(watching.signals.sent[owner_of(i)]) for i in ids[:2]] == [1, 1]
    assert f"ferry/x/run/{ids[2]}" not in watching.signals.sent
    assert watching.store.log_size(ids[2]) == 0


async def test_a_watch_started_again_tells_again_what_has_not_been_removed(watching: Watching) -> None:
    task_id = new_id()
    async with watching.agent.client() as client:
        await start_job(client, ["echo early"], task_id=task_id, task_fields={"owner": owner_of(task_id)})
        first = watching.start()
        await watching.signals.until(owner_of(task_id))
        await stopped(first, watching.env)
        watching.env = ActivityEnvironment()
        again = watching.start()
        deadline = time.monotonic() + 20
        while len(watching.signals.sent[owner_of(task_id)]) < 2:
            assert time.monotonic() < deadline, "the restarted watch did not tell the ended task"
            await asyncio.sleep(0.05)
        await stopped(again, watching.env)
    assert watching.store.read_log(task_id)[0] == b"early\n"  # stored once, not twice


async def test_a_newer_watch_of_the_instance_replaces_the_older_one(watching: Watching) -> None:
    """As when the fleet abandons an idle instance's watch and starts another for its next job before the
    first has heard: the older one returns at once, and the job is told once."""
    older = watching.start()
    await asyncio.sleep(0.5)  # listening
    assert watching.activities is not None  # the older watch's, which the newer one shares
    newer_env = ActivityEnvironment()
    request = WatchInstance(instance_name="local", owners=PROJECT)
    newer = asyncio.create_task(newer_env.run(watching.activities.watch_instance, request))
    await asyncio.wait_for(older, 30)  # returned (at once): not cancelled, not failed
    task_id = new_id()
    async with watching.agent.client() as client:
        await start_job(client, ["echo once"], task_id=task_id, task_fields={"owner": owner_of(task_id)})
        await watching.signals.until(owner_of(task_id))
        await asyncio.sleep(1.0)  # time for a second word, were one to come
    await stopped(newer, newer_env)
    assert len(watching.signals.sent[owner_of(task_id)]) == 1


async def test_a_silent_agent_ends_its_running_jobs_as_unreachable(watching: Watching) -> None:
    task_id = new_id()
    async with watching.agent.client() as client:
        await start_job(client, ["sleep 60"], task_id=task_id, task_fields={"owner": owner_of(task_id)})
    watch = watching.start(unreachable_after=1.0)
    await asyncio.sleep(1.0)  # the watch has listed the task
    watching.agent.kill()
    lost = await watching.signals.until(owner_of(task_id))
    await stopped(watch, watching.env)
    assert lost.termination_reason == JobTerminationReason.INSTANCE_UNREACHABLE
    assert lost.termination_message is not None and "local silent for" in lost.termination_message


async def test_a_task_whose_record_cannot_be_read_after_a_restart_ends_its_job_saying_so(
    watching: Watching, tmp_path: Path
) -> None:
    """docs/jobs.md#a-restarted-agent: an agent started again that cannot read a task's record (a disk that
    failed, say) reports the task ended with why; its job hears it, never a silent wait."""
    task_id = new_id()
    async with watching.agent.client() as client:
        await start_job(client, ["sleep 60"], task_id=task_id, task_fields={"owner": owner_of(task_id)})
    watch = watching.start()
    await asyncio.sleep(1.0)  # the watch has listed the task, and knows its owner
    stop_agent(watching.agent)
    (watching.agent.data_dir / "tasks" / task_id / "task.json").write_bytes(b'{"id": "' + b"\0" * 8)
    port = ("--port", str(watching.agent.port))  # where the watch looks for it: the last --port counts
    again = start_agent(tmp_path / "again", data_dir=watching.agent.data_dir, extra_args=port, wait=False)
    again.port, again.url = watching.agent.port, watching.agent.url
    try:
        wait_healthy(again)
        ended = await watching.signals.until(owner_of(task_id))
        await stopped(watch, watching.env)
        async with again.client() as client:
            [task] = await client.list_tasks()
    finally:
        stop_agent(again)
    assert (ended.termination_reason, ended.task_id) == (JobTerminationReason.EXECUTOR_ERROR, task_id)
    assert ended.termination_message is not None
    assert ended.termination_message.startswith("the agent cannot read this task's record on its host: ")
    assert (task.id, task.status, task.termination_message) == (
        task_id,
        "terminated",
        ended.termination_message,
    )
