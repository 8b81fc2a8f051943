"""Two workers on one stack, as a deployment runs them (docs/scaling.md#several-workers): one is SIGKILLed
while jobs run and never comes back. The other carries every run to its end: each run done once, its job
started once and its log whole, and nothing left behind (the chaos suite's audit, docs/chaos.md)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from core.settings import DEFAULT_PROJECT
from core.wire.workflow_ids import job_workflow_id, run_workflow_id
from embedded.extra_workers import ExtraWorkers
from embedded.stack import Stack
from store.keys import load_keys
from tests.chaos.audit import ZERO_GOALS, runs_figures
from tests.chaos.stream import ChaosStream, Profile, until
from tests.e2e.conftest import Ferry, ferry_env, stack_of
from worker.temporal import connect

RUNS = 12
KILL_AFTER = 6  # submissions; the rest go to the one worker left


async def identities(stack: Stack, env: dict[str, str], names: list[str]) -> set[str]:
    """The workers (`pid@host`) that ran a workflow task or an activity of the runs' workflows."""
    address = stack.status().address
    assert address is not None
    client = await connect(address, keys=load_keys(env))
    found: set[str] = set()
    for name in names:
        run = run_workflow_id(DEFAULT_PROJECT, name)
        for workflow_id in (run, job_workflow_id(run, 0, 0, 0)):
            async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
                found.add(event.workflow_task_started_event_attributes.identity)
                found.add(event.activity_task_started_event_attributes.identity)
    return found - {""}


def test_a_worker_killed_for_good_leaves_its_runs_to_the_other(tmp_path: Path) -> None:
    home, configs = tmp_path / "home", tmp_path / "configs"
    home.mkdir()
    configs.mkdir()
    env = ferry_env(home)
    ferry = Ferry(home, env)
    stream = ChaosStream(ferry, Profile("two workers", runs=RUNS, kills=()), "workers", configs)
    stream.markers.mkdir()
    with stack_of(ferry):
        stream.submit(0)  # the command that starts the stack
        stack = Stack(home, env)
        extra = ExtraWorkers(stack)
        [second] = extra.start(1)
        try:
            for index in range(1, RUNS):
                stream.submit(index)
                if index == KILL_AFTER:
                    until("a job to run", lambda: bool(stream.running_jobs()))
                    os.kill(second, signal.SIGKILL)
            until("the second worker to die", lambda: extra.pids == [])
            still_active = stream.await_finished()
            worked = asyncio.run(identities(stack, env, stream.names))
        finally:
            extra.stop()
        audits, leaks = stream.audit()
    figures = {**runs_figures(audits), **leaks, "runs still active at the end": len(still_active)}
    problems = [f"{audit.name}: {'; '.join(audit.problems)}" for audit in audits if audit.problems]
    assert problems == []
    assert figures["runs done"] == RUNS, figures
    for name in ZERO_GOALS:
        assert figures.get(name, 0) == 0, f"{name}: {figures[name]:g}"
    # Not vacuous: the killed worker had taken part, and the other carried on.
    assert any(identity.startswith(f"{second}@") for identity in worked), worked
    assert len(worked) >= 2, worked
