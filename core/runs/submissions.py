"""What RunWorkflow gives each job submission it starts: its spec, its resources, and its placement.

Pure: the workflow passes its input and its state. Node 0 of a replica carries the replica's placement
request (every node's job, by its JobWorkflow id) for the run's fleet; every node knows the request's id.
"""

from __future__ import annotations

from core.configuration import RunConfiguration
from core.run_types import configurator_for
from core.run_types.volumes import job_volumes, volumes_instance
from core.runs import startup
from core.runs.state_machine import RunState
from core.runs.workflow_messages import RunInput
from core.status import JobStatus
from core.wire.job_messages import Enqueue, JobInput, NodeRequest, PlacementRequest
from core.wire.workflow_ids import fleet_workflow_id, job_submission_id, job_workflow_id, placement_request_id


def run_priority(inp: RunInput, state: RunState) -> int:
    """The configuration's priority, unless `ferry set-priority` changed it (a `priority` event)."""
    return state.priority if state.priority is not None else inp.configuration.priority


def job_input(inp: RunInput, state: RunState, run_workflow_id: str, replica: int, job: int) -> JobInput:
    """The latest submission of (replica, job), as its JobWorkflow starts."""
    current = state.job(replica, job)
    assert current is not None
    replica_type = configurator_for(inp.configuration).for_group(current.group)
    conf = replica_type.configuration  # a replica group's: its commands and resources
    nodes = replica_type.nodes_per_replica()
    run_type = replica_type.for_node(job)  # a node group's: its commands, resources and ports
    siblings = [state.job(replica, n) for n in range(nodes)]
    assert all(s is not None for s in siblings)
    submissions = [s.submission_num for s in siblings if s is not None]
    volumes = [job_volumes(conf, inp.project, node, inp.volume_instances) for node in range(nodes)]
    enqueue = None
    if job == 0:
        enqueue = replica_enqueue(
            conf,
            run_id=inp.run_id,
            replica_num=replica,
            submissions=submissions,
            job_workflow_ids=[
                job_workflow_id(run_workflow_id, replica, n, s) for n, s in enumerate(submissions)
            ],
            priority=run_priority(inp, state),
            instances=[volumes_instance(node_volumes, inp.volume_instances) for node_volumes in volumes],
        )
    service = run_type.service_job()
    if service is not None:
        service = service.model_copy(update={"deployment_num": current.deployment})
    return JobInput(
        run_id=inp.run_id,
        run_workflow_id=run_workflow_id,
        project=inp.project,
        replica_num=replica,
        job_num=job,
        submission_num=current.submission_num,
        nodes_num=nodes,
        spec=run_type.job_spec(run_name=inp.run_name, replica_num=replica, job_num=job, repo_id=inp.repo_id),
        container=run_type.container_spec(),
        resources=run_type.resources(),
        code_hash=inp.code_hash,
        stop_duration=conf.stop_duration,
        priority=run_priority(inp, state),
        first_submitted_at=current.first_submitted_at,
        fleet_workflow_id=fleet_workflow_id(inp.project, inp.fleet),
        request_id=placement_request_id(inp.run_id, replica, submissions[0]),
        enqueue=enqueue,
        service=service,
        authorized_keys=inp.authorized_keys,
        volumes=volumes[job],
        node_groups=replica_type.node_groups(),
        waits_for=startup.still_waits_for(conf.startup_order, state, replica, job, nodes),
        utilization_policy=conf.utilization_policy,
        api_access=inp.configuration.calls_api(),
        revision=inp.revision,
    )


def waiting_requests(run_id: str, state: RunState) -> list[str]:
    """The placement requests of the replicas whose latest submission may still wait in the fleet's queue."""
    return sorted(
        {
            placement_request_id(run_id, j.replica_num, j.submission_num)
            for j in state.jobs
            if j.job_num == 0 and j.status == JobStatus.SUBMITTED
        }
    )


def replica_enqueue(
    configuration: RunConfiguration,
    *,
    run_id: str,
    replica_num: int,
    submissions: list[int],
    job_workflow_ids: list[str],
    priority: int,
    instances: list[str | None] | None = None,
) -> Enqueue:
    """A replica's placement request: one node per job (node j at submission `submissions[j]`, on
    `instances[j]` when that is set: the instance of its volumes)."""
    configurator = configurator_for(configuration)
    container = configurator.container_spec() is not None
    job_ids = [job_submission_id(run_id, replica_num, job, s) for job, s in enumerate(submissions)]
    only = instances or [None] * len(job_ids)
    # Each node with its own resources: a task's node groups differ (docs/runs.md#node-groups).
    nodes = [configurator.for_node(job_num) for job_num in range(len(job_ids))]
    request = PlacementRequest(
        request_id=placement_request_id(run_id, replica_num, submissions[0]),
        priority=priority,
        nodes=[
            NodeRequest(
                job_id=job,
                resources=node.resources(),
                spec=node.configuration.resources,
                instance=instance,
                container=container,
                # On the host, `privileged: true` is a placement requirement (docs/containers.md#privileged);
                # in a container it is the container's --privileged (the container spec).
                privileged=node.configuration.privileged and not container,
                picks=node.configuration.instances or [],  # docs/fleets.md#pinned-instances
            )
            for job, instance, node in zip(job_ids, only, nodes, strict=True)
        ],
    )
    return Enqueue(request=request, notify=dict(zip(job_ids, job_workflow_ids, strict=True)))
