"""`ferry attach` asks a job where its agent lets the user in (JobWorkflow.ssh_endpoint, docs/attach.md):
only a running job answers with its agent's SSH server; one not running yet says why. A dev environment
is such a job, kept up until its inactivity duration passes with nobody attached."""

from __future__ import annotations

from core.configuration import parse_configuration
from core.run_types.dev_environment import KEEPALIVE_COMMAND
from core.status import JobTerminationReason, RunStatus, RunTerminationReason
from core.wire import activity_names as names
from core.wire.messages import JobOutcome, SSHEndpoint
from core.wire.workflow_ids import job_workflow_id
from tests.workflows.doubles import BLOCK
from tests.workflows.harness import SMALL, Harness, configuration
from workflows.job import JobWorkflow

FIRST = (0, 0, 0)


async def test_a_job_not_running_yet_says_why(harness: Harness) -> None:
    harness.backend.prepare_script = {FIRST: BLOCK}
    handle = await harness.start(configuration("task"))
    job = harness.client.get_workflow_handle(job_workflow_id(handle.id, *FIRST))
    await harness.wait_for(handle, "provisioning", lambda s: s.status == RunStatus.PROVISIONING)
    early: SSHEndpoint = await job.execute_update(JobWorkflow.ssh_endpoint)
    assert early.refused == "the job is provisioning" and early.port is None
    assert harness.backend.called(names.SSH_ENDPOINT) == []  # no agent was asked
    await harness.stop(handle)
    await harness.result(handle)


async def test_a_running_job_tells_its_agents_ssh_server(harness: Harness) -> None:
    harness.backend.watch_script = {FIRST: BLOCK}
    handle = await harness.start(configuration("task"))
    job = harness.client.get_workflow_handle(job_workflow_id(handle.id, *FIRST))
    await harness.wait_for(handle, "running", lambda s: s.status == RunStatus.RUNNING)
    endpoint: SSHEndpoint = await job.execute_update(JobWorkflow.ssh_endpoint)
    assert (endpoint.port, endpoint.refused) == (2222, None)
    [asked] = harness.backend.called(names.SSH_ENDPOINT, FIRST)
    assert endpoint.user == asked.job_submission_id and endpoint.instance_name == asked.instance_name
    await harness.stop(handle)
    await harness.result(handle)


async def test_a_dev_environment_keeps_running_until_nobody_has_attached_for_its_inactivity_duration(
    harness: Harness,
) -> None:
    dev = {"type": "dev-environment", "ide": "vscode", "init": ["pip list"], "inactivity_duration": "1h"}
    conf = parse_configuration({**dev, "resources": SMALL})
    harness.backend.watch_script = {FIRST: BLOCK}
    handle = await harness.start(conf, "dev")
    await harness.wait_for(handle, "running", lambda s: s.status == RunStatus.RUNNING)
    [started] = harness.backend.called(names.START_JOB, FIRST)
    assert started.spec.commands == ["pip list", KEEPALIVE_COMMAND]
    assert started.spec.inactivity_duration == 3600
    # The agent ends the task once nobody was attached for the hour (agent/task_watch.py).
    harness.backend.finish_watch(
        FIRST,
        JobOutcome(
            termination_reason=JobTerminationReason.INACTIVITY_DURATION_EXCEEDED,
            termination_message="no one attached for 1h",
        ),
    )
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.INACTIVITY_DURATION_EXCEEDED,
    )
