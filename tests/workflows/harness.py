"""Starting runs on the test server, waiting on their state, and checking their eventlogs and histories."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowHistory
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from core.configuration import FleetConfiguration, parse_configuration
from core.eventlog import Event
from core.fleets.book import FleetInput
from core.fleets.messages import FleetDescription
from core.jobs.state_machine import replay_job
from core.runs.state_machine import RunState, replay_run
from core.runs.workflow_messages import RunDescription, RunInput
from core.settings import fleet_task_queue
from core.wire import revisions
from core.wire.job_messages import JobDescription
from core.wire.run_messages import DependencyTarget, RunResult, StopReply, StopRequest
from core.wire.workflow_ids import LOCAL_FLEET, fleet_workflow_id, job_workflow_id, run_workflow_id
from tests.workflows.doubles import FakeBackend, Key
from workflows.cycle import CycleWorkflow
from workflows.fleet import FleetWorkflow
from workflows.job import JobWorkflow
from workflows.pipeline import PipelineWorkflow
from workflows.run import RunWorkflow
from workflows.web_ui import failed_run_result

WORKFLOWS = [RunWorkflow, JobWorkflow, FleetWorkflow, CycleWorkflow, PipelineWorkflow]

PROJECT = "test"
WAIT_LIMIT = 30.0  # seconds of real time any one condition may take before the test fails
POLL = 0.02
SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}


def configuration(kind: str = "task", **fields: Any) -> Any:
    data: dict[str, Any] = {"type": kind, "commands": ["train"], "resources": SMALL, **fields}
    if kind == "service":
        data.setdefault("port", 8000)
    return parse_configuration(data)


_earlier_release: list[bool] = []  # set within `without_patch`


@contextlib.contextmanager
def without_patch(*patch_ids: str) -> Iterator[None]:
    """Workflows run as a release before `workflow.patched(patch_id)` did: they record no marker for it,
    and the runs submitted meanwhile hear their jobs' last words by signal, as runs submitted then did."""
    patched = workflow.patched
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(workflow, "patched", lambda id: id not in patch_ids and patched(id))
        _earlier_release.append(True)
        try:
            yield
        finally:
            _earlier_release.pop()


async def check_patch_guards(
    history: WorkflowHistory,
    patch_id: str,
    diverged: tuple[type[BaseException], ...] = (workflow.NondeterminismError,),
    workflows: Sequence[type] = WORKFLOWS,
) -> None:
    """A history recorded `without_patch(patch_id)` replays on today's workflows, and would not if the
    change the patch guards were made without its guard (the replay fails with one of `diverged`)."""
    replayer = Replayer(workflows=workflows, data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)
    patched = workflow.patched
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(workflow, "patched", lambda id: id == patch_id or patched(id))
        with pytest.raises(diverged):
            await replayer.replay_workflow(history)


def named(events: list[Event], name: str, **context: Any) -> list[Event]:
    """The events called `name` whose context has every given item."""
    return [e for e in events if e.name == name and all(e.context.get(k) == v for k, v in context.items())]


class Harness:
    def __init__(self, env: WorkflowEnvironment, backend: FakeBackend, queue: str) -> None:
        self._env: WorkflowEnvironment | None = env
        self.backend = backend
        self.queue = queue
        self.fleets: set[str] = set()

    @property
    def env(self) -> WorkflowEnvironment:
        assert self._env is not None
        return self._env

    @property
    def client(self) -> Client:
        return self.env.client

    def release(self) -> None:
        self._env = None

    async def run_input(
        self,
        conf: Any,
        name: str = "train",
        fleet: str = LOCAL_FLEET,
        dependencies: list[DependencyTarget] | None = None,
    ) -> RunInput:
        if fleet == LOCAL_FLEET:
            await self.start_fleet(LOCAL_FLEET)
        now = await self.env.get_current_time()
        return RunInput(
            run_id=f"{name}-0001",
            project=PROJECT,
            run_name=name,
            user="tester",
            configuration=conf,
            submitted_at=now.timestamp(),
            fleet=fleet,
            dependencies=dependencies or [],
            revision=0 if _earlier_release else revisions.CURRENT,  # docs/jobs.md#the-last-word
        )

    async def start(
        self,
        conf: Any,
        name: str = "train",
        fleet: str = LOCAL_FLEET,
        dependencies: list[DependencyTarget] | None = None,
    ) -> WorkflowHandle[Any, RunResult]:
        """A run of `conf`, id `<name>-0001`, waiting for `dependencies` (as FerryAPI resolves them)."""
        return await self.client.start_workflow(
            RunWorkflow.run,
            await self.run_input(conf, name, fleet, dependencies),
            id=run_workflow_id(PROJECT, name),
            task_queue=self.queue,
        )

    async def start_fleet(
        self, name: str, configuration: FleetConfiguration | None = None
    ) -> WorkflowHandle[Any, Any]:
        """The fleet's scheduler (local, or an SSH fleet on the doubles' hosts) unless it runs already."""
        self.fleets.add(name)
        return await self.client.start_workflow(
            FleetWorkflow.run,
            FleetInput(project=PROJECT, name=name, configuration=configuration),
            id=fleet_workflow_id(PROJECT, name),
            task_queue=fleet_task_queue(self.queue),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )

    def fleet(self, name: str = LOCAL_FLEET) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(fleet_workflow_id(PROJECT, name))

    async def describe_fleet(self, name: str = LOCAL_FLEET) -> FleetDescription:
        return await self.fleet(name).query(FleetWorkflow.describe)

    async def describe(self, handle: WorkflowHandle[Any, Any]) -> RunDescription:
        return await handle.query(RunWorkflow.describe)

    async def describe_job(self, handle: WorkflowHandle[Any, Any], key: Key) -> JobDescription:
        job = self.client.get_workflow_handle(job_workflow_id(handle.id, *key))
        return await job.query(JobWorkflow.describe)

    async def stop(self, handle: WorkflowHandle[Any, Any], *, abort: bool = False) -> StopReply:
        return await handle.execute_update(RunWorkflow.stop, StopRequest(abort=abort))

    async def result(self, handle: WorkflowHandle[Any, RunResult]) -> RunResult:
        """The run's result, skipping time while the test server waits on timers (bounded in real time);
        a FAILED run's, from the failure its workflow ends with (workflows/web_ui.py)."""
        try:
            return await asyncio.wait_for(handle.result(), WAIT_LIMIT)
        except WorkflowFailureError as err:
            result = failed_run_result(err.cause)
            if result is None:
                raise
            return result

    async def wait_for(
        self, handle: WorkflowHandle[Any, Any], what: str, ok: Callable[[RunState], bool]
    ) -> RunState:
        """Poll the run's state (in real time: no time is skipped) until `ok` holds."""
        deadline = time.monotonic() + WAIT_LIMIT
        while True:
            state = (await self.describe(handle)).state
            if ok(state):
                return state
            assert time.monotonic() < deadline, f"waited {WAIT_LIMIT:.0f}s for {what}; the run is {state}"
            await asyncio.sleep(POLL)

    async def wait_until(self, what: str, ok: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT_LIMIT
        while not ok():
            assert time.monotonic() < deadline, f"waited {WAIT_LIMIT:.0f}s for {what}"
            await asyncio.sleep(POLL)

    def run_events(self, run_id: str | None = None) -> list[Event]:
        """The run's eventlog as its record_run calls stored it (`run_id`: of one of several runs)."""
        if run_id is not None:
            return self.backend.runs[run_id].ordered()
        [log] = self.backend.runs.values()
        return log.ordered()

    def job_events(self, key: Key) -> list[Event]:
        return self.backend.jobs[key].ordered()

    async def check_eventlogs_replay(self, handle: WorkflowHandle[Any, Any]) -> None:
        """The stored eventlogs are the workflows' own, and replay to their state (docs/eventlog.md)."""
        described = await self.describe(handle)
        stored = self.run_events()
        assert described.first_seq == 0
        assert described.events == stored, _differences(described.events, stored)
        assert replay_run(stored) == described.state
        for key, log in self.backend.jobs.items():
            job = await self.describe_job(handle, key)
            assert job.events == log.ordered()
            state = replay_job(log.ordered())
            assert (state.status.value, state.termination_reason) == (log.status, log.reason)

    async def check_histories_replay(self, handle: WorkflowHandle[Any, Any]) -> None:
        """The recorded histories of the run and all its job submissions replay without nondeterminism."""
        replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
        handles = [handle] + [
            self.client.get_workflow_handle(job_workflow_id(handle.id, *key)) for key in self.backend.jobs
        ]
        handles += [self.fleet(name) for name in sorted(self.fleets)]
        for h in handles:
            await replayer.replay_workflow(await h.fetch_history())


def _differences(replayed: list[Event], stored: list[Event]) -> str:
    """Where a replayed eventlog and the stored one part (a failed check's message)."""
    lines = difflib.unified_diff(
        [e.model_dump_json() for e in replayed],
        [e.model_dump_json() for e in stored],
        "replayed",
        "stored",
        lineterm="",
    )
    return "\n".join(lines)
