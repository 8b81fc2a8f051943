"""The job's small pure choices (docs/jobs.md): which events a job's outcome or a failed step becomes
(RFC 21 exception types), why a job is ending, its status message, and its record and news for the run.
Kept here so that JobWorkflow stays thin and these stay testable without Temporal.
"""

from __future__ import annotations

from typing import Any

from core.configuration.interpolation import node_addresses, substitute
from core.eventlog import Event
from core.jobs.state_machine import JobState
from core.status import WAITING_FOR_CAPACITY, JobStatus, JobTerminationReason
from core.wire.agent_api import PortBinding, TaskNetwork
from core.wire.job_messages import JobInput, JobUpdate, Placement, TerminateJobRequest
from core.wire.messages import JobOutcome, PrepareTask, RecordJob, StartJobRequest
from core.wire.workflow_ids import LOCAL_INSTANCE, job_submission_id

# The reasons a job's own exit gives (a `finish` event); every other reason is an exception first.
EXITED = frozenset({JobTerminationReason.DONE_BY_RUNNER, JobTerminationReason.CONTAINER_EXITED_WITH_ERROR})

_EXCEPTION_TYPES = {
    JobTerminationReason.MAX_DURATION_EXCEEDED: "timelimit",
    JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY: "alloc",
    JobTerminationReason.INSTANCE_UNREACHABLE: "lost",
    JobTerminationReason.TERMINATED_BY_USER: "cancel",
    JobTerminationReason.ABORTED_BY_USER: "cancel",
}

EventSpec = tuple[str, dict[str, Any]]  # an event's name and context, before the workflow timestamps it


def exception_type(reason: JobTerminationReason) -> str:
    """RFC 21 exception types, where one fits."""
    return _EXCEPTION_TYPES.get(reason, "start")


def fatal(reason: JobTerminationReason, note: str | None, kind: str | None = None) -> EventSpec:
    """A severity-0 exception: the job terminates for `reason`."""
    context = {"type": kind or exception_type(reason), "severity": 0, "reason": reason, "note": note}
    return "exception", context


# How a stopped job's watch ends when the agent cannot tell: the fleet lost the instance, or the job was
# still there long after its grace period (the agent is presumed gone even if it answered before).
INSTANCE_LOST = JobOutcome(
    termination_reason=JobTerminationReason.INSTANCE_UNREACHABLE, termination_message="its instance was lost"
)
NO_END_AFTER_STOP = JobOutcome(
    termination_reason=JobTerminationReason.INSTANCE_UNREACHABLE,
    termination_message="the job did not end after it was stopped",
)


def lost_task_note(instance: str, terminate: TerminateJobRequest | None) -> str:
    """Why a job on a lost instance leaves its task there: gone for good, or to remove if it comes back."""
    if terminate is not None and terminate.instance_gone:
        return f"{instance} is gone, and its task with it"
    return f"{instance} is unreachable: its task is removed if it comes back"


def stop_event(request: TerminateJobRequest) -> EventSpec:
    """Why a job asked to stop ends: a cancel (RFC 21) in the run's words, or its instance's loss."""
    kind = None if request.reason == JobTerminationReason.INSTANCE_UNREACHABLE else "cancel"
    return fatal(request.reason, request.message or "stopped by the run", kind)


def reason_for_failure(error_type: str | None, default: JobTerminationReason) -> JobTerminationReason:
    """The reason a failed activity names by its ApplicationError type (e.g. "INSTANCE_UNREACHABLE")."""
    if error_type is not None and error_type in JobTerminationReason.__members__:
        return JobTerminationReason[error_type]
    return default


def outcome_events(state: JobState, outcome: JobOutcome) -> list[EventSpec]:
    """What a job's watch reported, as events: `finish` with the exit status when the process gave one,
    preceded by an exception when it ended for another reason than its own exit (unless it was already
    terminating, whose reason stays)."""
    reason = outcome.termination_reason
    note = outcome.termination_message or reason.message()
    terminating = state.status == JobStatus.TERMINATING
    events: list[EventSpec] = []
    if reason not in EXITED and not terminating:
        events.append(fatal(reason, note))
        terminating = True
    if outcome.exit_status is not None and state.exit_status is None:
        events.append(("finish", {"status": outcome.exit_status}))
    elif not terminating:
        events.append(fatal(reason, note, "exec"))
    return events


def last_note(state: JobState) -> str | None:
    """Why the job is ending, in the words of its last fatal exception."""
    return next((e.note for e in reversed(state.exceptions) if e.severity == 0), None)


# A job held by `startup_order` (core.runs.startup), by what its memo says it waits for.
_WAITING_FOR_PEERS = {
    "master": "waiting for the master node to start (startup_order: master-first)",
    "workers": "waiting for the worker nodes to start (startup_order: workers-first)",
    "router": "waiting for the router replica to run (router: dynamo)",
}


# A Dynamo worker's router replica's address (docs/services.md#a-dynamo-router): dstack's name, and Ferry's.
ROUTER_ADDRESS_ENV = ("DSTACK_ROUTER_INTERNAL_IP", "FERRY_ROUTER_INTERNAL_IP")


def peers_memo(inp: JobInput) -> str:
    """What a job held by `startup_order` logs it waits for: the master (job 0), or the workers."""
    return "master" if inp.waits_for == [0] else "workers"


def job_status_message(state: JobState) -> str | None:
    """A job's one-line status message beside its status: a submitted job its fleet has queued waits; a
    running one whose ports are published on other host ports says which (`ports 8000->41234`)."""
    waiting = state.memo.get("waiting")
    if state.status == JobStatus.SUBMITTED and waiting == "capacity":
        return WAITING_FOR_CAPACITY
    if state.status == JobStatus.PROVISIONING and waiting in _WAITING_FOR_PEERS:
        return _WAITING_FOR_PEERS[waiting]
    if state.status == JobStatus.RUNNING and state.memo.get("ports"):
        return f"ports {state.memo['ports']}"
    return None


def published_ports(ports: list[PortBinding]) -> str | None:
    """The job's ports the engine published on other host ports (a bridge network,
    docs/containers.md#networks), as the job's memo keeps them; None when each is reached as itself."""
    moved = [f"{p.container_port}->{p.host_port}" for p in ports if p.host_port != p.container_port]
    return ", ".join(moved) or None


def prepare_task(inp: JobInput, job_id: str, placement: Placement, owner: str | None) -> PrepareTask:
    """The agent's first step for a placed job: its resources reserved, its task registered (`owner`: the
    job's workflow, told of the task's end by its instance's watch)."""
    network = replica_network(inp, placement)
    container = inp.container
    if container is not None and network == "bridge":
        container = container.model_copy(update={"publish_address": publish_address(placement)})
    return PrepareTask(
        job_submission_id=job_id,
        instance_name=placement.instance_name,
        task_name=inp.spec.run_name,
        resources=inp.resources,
        env={**placement.env, **inp.spec.env},  # the fleet's, under the job's (docs/fleets.md#env)
        ports=[] if inp.service is None else [inp.service.port],
        network=network,
        authorized_keys=inp.authorized_keys,
        volumes=inp.volumes,
        container=container,
        owner=owner,
    )


def replica_network(inp: JobInput, placement: Placement) -> TaskNetwork:
    """A service replica on this machine gets its own network namespace, so that replicas listening on one
    port share the instance and the proxy reaches each at its namespace's address. On an SSH host that
    address is the host's own, out of the proxy's reach: there a replica uses the host's network, and a
    second one with the same port waits for the first (docs/services.md).

    A container (docs/containers.md#networks) gets the host's network when its instance is
    not shared or its job is one of several nodes, and the engine's bridge, its ports published on
    ephemeral host ports (publish_address), on a shared instance: this machine, which runs many jobs at
    once, or an instance split into blocks."""
    if inp.container is not None:
        shared = placement.instance_name == LOCAL_INSTANCE or placement.shared
        return "bridge" if shared and inp.nodes_num == 1 else "host"
    if inp.service is not None and placement.instance_name == LOCAL_INSTANCE:
        return "isolated"
    return "host"


def publish_address(placement: Placement) -> str:
    """Where a bridged container publishes its ports: this machine's loopback on the local instance, where
    the proxy runs; on an SSH host, the host's address, since the proxy cannot reach its loopback."""
    if placement.instance_name == LOCAL_INSTANCE:
        return "127.0.0.1"
    cluster = placement.cluster
    ips = cluster.node_ips or [cluster.master_node_ip]
    return ips[cluster.node_rank] if cluster.node_rank < len(ips) else cluster.master_node_ip


def starts_in_one_step(inp: JobInput) -> bool:
    """A job with no peers to wait for once prepared (`startup_order`) and no image to pull: its task is
    prepared and started by one activity, whose history events are fewer (docs/jobs.md#one-step-start).
    A container's pull is a step of its own, so that `ferry ps` shows it PULLING meanwhile."""
    return not inp.waits_for and inp.container is None and not waits_for_router(inp)


def waits_for_router(inp: JobInput) -> bool:
    """A Dynamo worker replica: started once the router replica runs, with its address
    (docs/services.md#a-dynamo-router)."""
    return inp.service is not None and inp.service.waits_for_router()


def start_job(
    inp: JobInput, job_id: str, placement: Placement, router_address: str | None = None
) -> StartJobRequest:
    """The agent's second step: the job started with its code, knowing its cluster (every node's IP) and,
    a Dynamo worker, its router replica's address (under dstack's name and Ferry's)."""
    cluster = placement.cluster
    spec = inp.spec.model_copy(update={"cluster_info": cluster})
    if router_address is not None:
        env = {**spec.env, **dict.fromkeys(ROUTER_ADDRESS_ENV, router_address)}
        spec = spec.model_copy(update={"env": env})
    if inp.node_groups:  # `${{ groups[i].nodes[j].IP_ADDRESS }}`: known now that the replica is placed
        addresses = node_addresses(inp.node_groups, cluster.node_ips or [cluster.master_node_ip])
        spec = spec.model_copy(update={"commands": [substitute(c, addresses) for c in spec.commands]})
    return StartJobRequest(
        job_submission_id=job_id,
        instance_name=placement.instance_name,
        spec=spec,
        code_hash=inp.code_hash,
        api_access=inp.api_access,
    )


def job_record(inp: JobInput, state: JobState, start_seq: int, events: list[Event]) -> RecordJob:
    """A job submission's new events (from `start_seq`) and its status, for the store."""
    job_id = job_submission_id(inp.run_id, inp.replica_num, inp.job_num, inp.submission_num)
    return job_record_of(job_id, inp.run_id, state, start_seq, events)


def job_record_of(
    job_id: str, run_id: str, state: JobState, start_seq: int, events: list[Event]
) -> RecordJob:
    """The same, for a job known by its ids and its replayed state (core.runs.stuck_stop)."""
    finished_at = state.times.get(state.status) if state.status.is_finished() else None
    return RecordJob(
        job_submission_id=job_id,
        run_id=run_id,
        replica_num=state.replica_num,
        job_num=state.job_num,
        submission_num=state.submission_num,
        status=state.status,
        termination_reason=state.termination_reason,
        termination_message=last_note(state),
        exit_status=state.exit_status,
        instance_name=state.instance,
        submitted_at=state.times[JobStatus.SUBMITTED],
        provisioned_at=state.times.get(JobStatus.PROVISIONING),
        finished_at=finished_at,
        start_seq=start_seq,
        events=events,
        status_message=job_status_message(state),
    )


def job_update(inp: JobInput, state: JobState, now: float, start_seq: int, events: list[Event]) -> JobUpdate:
    """A job submission's news for its run: its status, and its new events (from `start_seq`) to store."""
    return JobUpdate(
        replica_num=inp.replica_num,
        job_num=inp.job_num,
        submission_num=inp.submission_num,
        timestamp=now,
        record=job_record(inp, state, start_seq, events),
        serving=state.memo.get("serving"),
    )
