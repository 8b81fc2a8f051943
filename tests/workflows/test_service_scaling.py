"""A service's replicas with the workflows and activity doubles (docs/services.md): each replica is probed
once running, drained before it is stopped, and unregistered at its end; the load watch's answers scale
the run up, down (SCALED_DOWN jobs no longer count) and to zero (PENDING until a request wakes it)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.configuration import parse_configuration
from core.status import JobStatus, JobTerminationReason, RunStatus
from core.wire import activity_names as names
from tests.workflows.doubles import BLOCK
from tests.workflows.harness import Harness, configuration, named

AUTOSCALED = {"replicas": "0..3", "scaling": {"target": 10, "scale_up_delay": 0, "scale_down_delay": 0}}


def serving(state: Any) -> list[tuple[int, int]]:
    """(replica, submission) of every job that is active and not stopping."""
    return [
        (j.replica_num, j.submission_num)
        for j in state.jobs
        if j.status.is_active() and j.status != JobStatus.TERMINATING
    ]


async def test_a_replica_is_probed_drained_then_stopped_and_unregistered(harness: Harness) -> None:
    backend = harness.backend
    backend.watch_script = {(0, 0, 0): BLOCK}
    handle = await harness.start(configuration("service", port=8100))
    await harness.wait_until("the replica to be ready", lambda: len(backend.called(names.PROBE_REPLICA)) == 2)
    [probe, *_] = backend.called(names.PROBE_REPLICA)
    assert probe.service.port == 8100 and probe.replica_num == 0
    [prepare] = backend.called(names.PREPARE_TASK)
    assert prepare.network == "isolated" and prepare.ports == [8100]
    await harness.stop(handle)
    result = await harness.result(handle)
    assert result.status == RunStatus.TERMINATED
    order = [name for name, key, _ in backend.calls if key == (0, 0, 0)]
    assert (
        order.index(names.DRAIN_REPLICA)
        < order.index(names.STOP_TASK)
        < order.index(names.UNREGISTER_REPLICA)
    )
    memos = named(harness.job_events((0, 0, 0)), "memo")
    assert [m.context.get("serving") for m in memos][:1] == ["ready"]
    await harness.check_eventlogs_replay(handle)


# Its stops cancel activities that may be completing: the test server's ACTIVITY_UNKNOWN (conftest.py).
@pytest.mark.dev_server
async def test_the_load_scales_up_down_to_zero_and_back(harness: Harness) -> None:
    backend = harness.backend
    backend.watch_script = {(r, 0, s): BLOCK for r in range(3) for s in range(3)}
    handle = await harness.start(configuration("service", **AUTOSCALED))
    await harness.wait_for(handle, "one replica", lambda s: s.status == RunStatus.RUNNING)
    assert backend.load_watches[-1].current == 1

    backend.push_load(3, 25.0)
    # All three running (and so registered), or a replica stopped before it ran has nothing to drain.
    state = await harness.wait_for(
        handle, "three replicas", lambda s: sum(j.status == JobStatus.RUNNING for j in s.jobs) == 3
    )
    assert state.replicas == 3 and serving(state) == [(0, 0), (1, 0), (2, 0)]

    await harness.wait_until("the watch of three", lambda: backend.load_watches[-1].current == 3)
    backend.push_load(1, 4.0)
    state = await harness.wait_for(
        handle,
        "two replicas scaled down",
        lambda s: (
            sum(j.termination_reason == JobTerminationReason.SCALED_DOWN for j in s.jobs) == 2
            and all(j.status.is_finished() for j in s.jobs if j.replica_num > 0)
        ),
    )
    assert state.status == RunStatus.RUNNING and serving(state) == [(0, 0)]
    # Both drained (the newest-first order of the stops is core's, tests/core/test_run_scaling.py; the two
    # jobs' drains then run side by side, in either order).
    assert sorted(c.job_submission_id[-8:] for c in backend.called(names.DRAIN_REPLICA)) == [
        "r1-j0-s0",
        "r2-j0-s0",
    ]

    backend.push_load(0, 0.0)
    state = await harness.wait_for(handle, "scaled to zero", lambda s: s.status == RunStatus.PENDING)
    assert (await harness.describe(handle)).state.replicas == 0

    backend.push_load(1, 0.02)  # a request waits in the proxy
    state = await harness.wait_for(handle, "woken", lambda s: s.status == RunStatus.RUNNING)
    # A finished replica's number again, a new submission (replica 0's, unless it is still stopping).
    [(replica, submission)] = serving(state)
    assert replica in (0, 1, 2) and submission == 1
    scales = [(e.context["replicas"], e.context["rps"]) for e in named(harness.run_events(), "scale")]
    assert scales == [(3, 25.0), (1, 4.0), (0, 0.0), (1, 0.02)], scales

    await harness.stop(handle)
    result = await harness.result(handle)
    assert result.status == RunStatus.TERMINATED
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_a_rolling_deployment_replaces_each_replica_after_a_new_one_is_ready(harness: Harness) -> None:
    from core.wire.run_messages import DeployRequest
    from workflows.run import RunWorkflow

    backend = harness.backend
    backend.watch_script = {(r, 0, 0): BLOCK for r in range(4)}
    handle = await harness.start(configuration("service", replicas=2))
    await harness.wait_for(
        handle, "two replicas", lambda s: len(serving(s)) == 2 and s.status == RunStatus.RUNNING
    )
    changed = configuration("service", replicas=2, commands=["serve v2"])
    refused = await handle.execute_update(
        RunWorkflow.deploy, DeployRequest(configuration=configuration("task"))
    )
    assert refused.refused == "cannot change in place: type"
    reply = await handle.execute_update(RunWorkflow.deploy, DeployRequest(configuration=changed))
    assert (reply.deployment, reply.changed, reply.refused) == (1, ["commands"], None)
    state = await harness.wait_for(
        handle,
        "the old replicas replaced",
        lambda s: (
            [(j.replica_num, j.deployment) for j in s.jobs if not j.status.is_finished()] == [(2, 1), (3, 1)]
        ),
    )
    assert state.status == RunStatus.RUNNING
    # The new replicas run the new commands; each old one was drained before it stopped.
    assert [s.spec.commands for s in backend.called(names.START_JOB) if s.spec.replica_num >= 2] == [
        ["serve v2"],
        ["serve v2"],
    ]
    drained = {c.job_submission_id[-8:] for c in backend.called(names.DRAIN_REPLICA)}
    assert {"r0-j0-s0", "r1-j0-s0"} <= drained
    # Replica 1 (the newest old one) stopped only after replica 2 was ready.
    events = harness.run_events()
    ready_2 = next(i for i, e in enumerate(events) if e.name == "job-serving" and e.context["replica"] == 2)
    stop_1 = next(
        i
        for i, e in enumerate(events)
        if e.name == "job-status" and e.context["replica"] == 1 and e.context["status"] == "terminating"
    )
    assert ready_2 < stop_1
    [deployed] = named(events, "deploy")
    assert deployed.context == {"deployment": 1, "changed": ["commands"]}
    # The run wrote the configuration it took to its store row, once (the CLI no longer does).
    [run_log] = backend.runs.values()
    [stored] = run_log.configurations
    assert parse_configuration(json.loads(stored)) == changed
    await harness.stop(handle)
    await harness.result(handle)
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)
