"""Every release's recorded histories replay on today's workflows (docs/upgrades.md): a change that
would break a run in flight on any earlier release fails here, naming the test that recorded it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.workflows.broken_release import RunWorkflowThatForgetsTheStore
from tests.workflows.harness import WORKFLOWS
from tests.workflows.recording import RecordedExecution, recorded_executions, recorded_releases
from workflows.job import JobWorkflow
from workflows.notify import NotifyWorkflow
from workflows.run import RunWorkflow

RELEASES = recorded_releases()
# NotifyWorkflow's histories are recorded from the release after 0.1.0 on (tests/workflows/test_notify.py).
REPLAYED = [*WORKFLOWS, NotifyWorkflow]


async def replay_failures(workflows: list[type], executions: list[RecordedExecution]) -> list[str]:
    replayer = Replayer(workflows=workflows, data_converter=pydantic_data_converter)
    results = await replayer.replay_workflows(_each(executions), raise_on_replay_failure=False)
    return [
        f"{e.test}: {e.workflow_type} {e.workflow_id}: {results.replay_failures[e.run_id]}"
        for e in executions
        if e.run_id in results.replay_failures
    ]


def test_a_release_is_recorded() -> None:
    assert RELEASES, "tests/histories/ has no release: scripts/record_release.py records one"


@pytest.mark.parametrize("version", RELEASES)
async def test_the_histories_of_a_release_replay_today(version: str) -> None:
    executions = recorded_executions(version)
    # Every kind of workflow. A whole history checks each of its prefixes too: the commands of every
    # workflow task are compared, so a run upgraded at any point of it would have gone on.
    assert {w.__name__ for w in WORKFLOWS} <= {e.workflow_type for e in executions}
    failures = await replay_failures(REPLAYED, executions)
    broken = f"{len(failures)} of {len(executions)} histories of {version} no longer replay"
    assert not failures, "\n".join([broken, *failures[:20]])


@pytest.mark.parametrize("version", RELEASES[-1:])
async def test_a_change_without_its_patch_fails_the_replay(version: str) -> None:
    """Not vacuous: a run workflow that stopped writing the store, unguarded, breaks recorded runs."""
    runs = [e for e in recorded_executions(version) if e.workflow_type == RunWorkflow.__name__]
    failures = await replay_failures([RunWorkflowThatForgetsTheStore, JobWorkflow], runs)
    assert len(failures) > len(runs) // 2
    assert all("Nondeterminism" in f or "nondeterminism" in f for f in failures)


async def _each(executions: list[RecordedExecution]) -> AsyncIterator[WorkflowHistory]:
    for execution in executions:
        yield execution.history
