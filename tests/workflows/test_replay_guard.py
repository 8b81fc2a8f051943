"""The replay check of recorded histories catches a change that breaks determinism (docs/README.md)."""

from __future__ import annotations

import pytest
from temporalio import workflow
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.workflows.broken_release import RunWorkflowThatForgetsTheStore
from tests.workflows.harness import WORKFLOWS, Harness, configuration
from workflows.job import JobWorkflow


async def test_replayer_catches_a_nondeterministic_change(harness: Harness) -> None:
    handle = await harness.start(configuration())
    await harness.result(handle)
    history = await handle.fetch_history()
    same = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    await same.replay_workflow(history)
    changed = Replayer(
        workflows=[RunWorkflowThatForgetsTheStore, JobWorkflow], data_converter=pydantic_data_converter
    )
    with pytest.raises(workflow.NondeterminismError):
        await changed.replay_workflow(history)
