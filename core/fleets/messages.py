"""The messages of FleetWorkflow, the fleet's scheduler: its signals, its notices to jobs, its activities'.

One pydantic model in, one out (docs/README.md). Placement decisions travel as instance names: addresses of
agents and their tokens stay in the workers (activities.instances).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from core.configuration import FleetConfiguration
from core.fleets.matching import InstanceResources
from core.fleets.placement import InstanceSlot, InstanceStatus
from core.fleets.scheduling import InstanceCapacity
from core.fleets.status import FleetStatus
from core.status import JobTerminationReason
from core.wire.agent_api import Resources
from core.wire.base import Frozen
from core.wire.job_messages import Enqueue, Placement

# Signals of FleetWorkflow, and the ones it sends to JobWorkflows.
FLEET_ENQUEUE = "enqueue"
FLEET_RELEASE = "release"
FLEET_CANCEL = "cancel"
FLEET_SET_PRIORITY = "set_priority"
FLEET_INSTANCE_UNREACHABLE = "instance_unreachable"
FLEET_INSTANCE_READY = "instance_ready"
JOB_PLACED = "placed"
JOB_REFUSED = "placement_refused"
JOB_QUEUED = "queued"
JOB_TERMINATE = "terminate"
# An array's elements share one workflow (workflows/elements.py): the fleet hears their requests and
# releases in batches, and tells that workflow a step's notices in one signal.
FLEET_ENQUEUE_MANY = "enqueue_many"
FLEET_RELEASE_MANY = "release_many"
ELEMENTS_NOTICES = "fleet_notices"


# --- the scheduler's messages ---------------------------------------------------------------------------


class ReleaseJob(Frozen):
    job_id: str


class ReleaseJobs(Frozen):
    job_ids: list[str] = Field(min_length=1)


class EnqueueMany(Frozen):
    enqueues: list[Enqueue] = Field(min_length=1)


class CancelRequest(Frozen):
    request_id: str


class SetQueuedPriorityRequest(Frozen):
    request_ids: list[str]
    priority: int = Field(ge=0, le=100)


class InstanceChange(Frozen):
    """An instance lost (UNREACHABLE) or back in service (READY, with what its agent reports now)."""

    name: str
    status: InstanceStatus
    slot: InstanceSlot | None = None
    note: str | None = None


class DeleteFleet(Frozen):
    pass


class NoticeKind(StrEnum):
    PLACED = JOB_PLACED
    REFUSED = JOB_REFUSED
    QUEUED = JOB_QUEUED
    TERMINATE = JOB_TERMINATE


class Notice(Frozen):
    """A signal for one JobWorkflow."""

    kind: NoticeKind
    job_id: str
    workflow_id: str
    placement: Placement | None = None
    message: str | None = None  # why it is refused or terminated
    position: int | None = None  # in the queue, for QUEUED
    reason: JobTerminationReason = JobTerminationReason.INSTANCE_UNREACHABLE  # what TERMINATE ends it with
    instance_gone: bool = False  # TERMINATE: its instance will not come back (docs/backends.md)


class FleetNotices(Frozen):
    """A step's notices for the jobs of one elements workflow, in one signal."""

    notices: list[Notice]


class Undelivered(Frozen):
    """A notice its JobWorkflow could not be signalled (it has ended), back in the fleet's inbox: what was
    granted to the job comes back, a request it waits in goes (`book.undelivered`)."""

    notice: Notice


class QueuedRequest(Frozen):
    request_id: str
    priority: int
    position: int
    jobs: list[str]


class InstanceView(Frozen):
    """One instance as the store keeps it for `ferry fleet list`: its load, and what it is (`hardware`,
    `container_engine`, `agent_release`: as its agent last described it)."""

    name: str
    status: str
    address: str
    total: Resources
    blocks: int | None
    busy_blocks: int
    jobs: int
    message: str | None = None
    in_use: Resources = Field(default_factory=Resources, description="what its jobs hold")
    hardware: InstanceResources | None = None
    container_engine: str | None = None
    agent_release: str | None = None


class FleetDescription(Frozen):
    name: str
    local: bool
    deployed: bool  # the first deployment has ended (every host deployed, or why not in `pending`)
    deleting: bool
    instances: list[InstanceCapacity]
    pending: dict[str, str]  # hosts not deployed, and why
    queue: list[QueuedRequest]
    idle: bool  # nothing allocated, nothing waiting


FleetCommand = (
    Enqueue
    | ReleaseJob
    | CancelRequest
    | SetQueuedPriorityRequest
    | InstanceChange
    | DeleteFleet
    | Undelivered
)


# --- activities ----------------------------------------------------------------------------------------


class LocalInstance(Frozen):
    fleet: str


class DeployInstance(Frozen):
    """Deploy the agent on host `index` of an SSH fleet; its InstanceSlot comes back."""

    project: str
    fleet: str
    index: int
    configuration: FleetConfiguration


class WatchFleet(Frozen):
    """Check the agents of `ready` instances every few seconds, and deploy `unreachable` ones again.
    `described`: each ready instance's `description_key` as the fleet knows it; an agent that describes
    its instance otherwise at a check is reported READY with its new slot. Empty: descriptions unchecked
    (a fleet begun before the patch `instance-descriptions`)."""

    project: str
    fleet: str
    configuration: FleetConfiguration
    ready: list[str]
    unreachable: list[str]
    described: dict[str, str] = Field(default_factory=dict)


class WatchLocal(Frozen):
    """Check this machine's agent every few seconds, until it describes the local instance otherwise than
    `described` (its `description_key`): started again with an engine installed, say."""

    fleet: str
    described: str


class HealthReport(Frozen):
    changes: list[InstanceChange]


class CleanInstance(Frozen):
    """Remove these jobs' tasks from an instance that is back (they failed when it was lost)."""

    instance: str
    job_ids: list[str]


class RecordFleet(Frozen):
    project: str
    fleet: str
    status: FleetStatus
    instances: list[InstanceView]
    waiting: list[str] | None = Field(
        default=None,
        description="the jobs in its queue, served first first; None: its jobs are told themselves",
    )
    why: dict[str, str] = Field(
        default_factory=dict,
        description="what a waiting job waits for, where more is known (a backend's words)",
    )


class StopFleet(Frozen):
    """Stop the agents of a deleted SSH fleet's hosts and forget them."""

    project: str
    fleet: str
    configuration: FleetConfiguration | None  # None: the local fleet, whose agent stays


class FleetResult(Frozen):
    deleted: bool = True
