"""Workflow tests on Temporal's time-skipping test server, with the activities replaced by doubles; a test
marked `dev_server` runs on a real dev server instead (real time, no skipping)."""

from __future__ import annotations

import gc
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.signals import SignalActivities
from core.settings import fleet_task_queue
from embedded.devserver import TUNING_ARGS, temporal_binary
from tests.workflows.doubles import FakeBackend
from tests.workflows.harness import WORKFLOWS, Harness
from tests.workflows.recording import record_test_histories, recording_dir
from workflows.search_attributes import SEARCH_ATTRIBUTES

KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
TEST_SERVER = Path(sys.executable).parent / "temporal-test-server"


@pytest.fixture
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """A fresh test server, and a worker running both workflows on the doubles of `harness.backend`;
    with FERRY_RECORD_HISTORIES set, the test's histories recorded after it (tests/workflows/recording.py).
    """
    if request.node.get_closest_marker("dev_server") is None:
        env = await WorkflowEnvironment.start_time_skipping(
            data_converter=pydantic_data_converter, test_server_existing_path=str(TEST_SERVER)
        )
        # RunWorkflow keeps FerryStatus up to date; the test server needs it registered.
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=env.client.namespace,
                search_attributes={
                    key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for key in SEARCH_ATTRIBUTES
                },
            )
        )
    else:
        # The test server fails a workflow task that cancels an activity completing in the same task
        # (ACTIVITY_UNKNOWN, then the workflow is stuck); the real server takes it. A test whose cancels
        # race completions under load runs here. Its search attributes are given at its start, as the
        # embedded stack's are: with its caches on (TUNING_ARGS), one added later is seen only once they
        # refresh, seconds later (docs/deployment.md#the-embedded-stack).
        env = await WorkflowEnvironment.start_local(
            data_converter=pydantic_data_converter,
            dev_server_existing_path=temporal_binary(),
            dev_server_extra_args=list(TUNING_ARGS),
            search_attributes=SEARCH_ATTRIBUTES,
        )
    backend = FakeBackend()
    backend.client = env.client
    queue = f"wf-{uuid.uuid4().hex[:8]}"
    # Signals sent for the workflows by a local activity go through the real one (workflows/signals.py).
    activities = [*backend.activities(), SignalActivities(env.client).send_signals]
    # As a Ferry worker does (worker/main.py): the fleets on a queue of their own beside the runs'.
    workers = [
        Worker(
            env.client,
            task_queue=task_queue,
            workflows=WORKFLOWS,
            activities=activities,
            # Heartbeats reach the server at once, so a cancelled activity hears of it at its next beat.
            default_heartbeat_throttle_interval=timedelta(milliseconds=50),
            max_heartbeat_throttle_interval=timedelta(milliseconds=50),
        )
        for task_queue in (queue, fleet_task_queue(queue))
    ]
    harness = Harness(env, backend, queue)
    try:
        async with workers[0], workers[1]:
            yield harness
            if (directory := recording_dir()) is not None:
                test = f"{request.node.module.__name__.rsplit('.', 1)[-1]}.{request.node.name}"
                await record_test_histories(env.client, directory, test)
    finally:
        await env.shutdown()
        # The test server's handle must be freed while the event loop lives: freed at interpreter exit
        # instead, the SDK's native side may abort the process (PyGILState_Release during finalization).
        harness.release()
        del env, workers
        gc.collect()
