"""`ferry attach` asks a job where its agent lets the user in (JobWorkflow.ssh_endpoint, docs/attach.md):
only a running job answers with its agent's SSH server; one not running yet says why."""

from __future__ import annotations

from core.status import RunStatus
from core.wire import activity_names as names
from core.wire.messages import SSHEndpoint
from core.wire.workflow_ids import job_workflow_id
from tests.workflows.doubles import BLOCK
from tests.workflows.harness import Harness, configuration
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
