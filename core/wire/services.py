"""Messages between the workflows and the services activities (activities.services; docs/services.md)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from core.configuration.service import ProbeSpec
from core.wire.base import Message


class ReplicaState(StrEnum):
    """A service replica's state, as the proxies see it (core.services.probes moves it)."""

    PROBING = "probing"  # its job runs, its probes have not passed yet: no traffic
    READY = "ready"  # its probes pass: it gets new requests
    UNREADY = "unready"  # its probes failed after it was ready: no new requests until they pass again
    DRAINING = "draining"  # it is being stopped: no new requests, those in flight finish

    def gets_requests(self) -> bool:
        return self == ReplicaState.READY


class ScalingRule(Message):
    """A service's `replicas` range and `scaling`, in seconds."""

    min_replicas: int = Field(ge=0)
    max_replicas: int = Field(ge=1)
    target: float = Field(gt=0)  # requests per second per replica
    window: float = Field(gt=0)
    scale_up_delay: float = Field(ge=0)
    scale_down_delay: float = Field(ge=0)


class ServiceJob(Message):
    """What a service replica's job knows of serving: the port its commands listen on and its probes."""

    port: int
    probes: list[ProbeSpec] = Field(default_factory=list)
    deployment_num: int = 0
    group: str | None = None  # the replica's group (None: the single form)
    # The group that routes the service's requests to the others (docs/services.md#a-router-group)
    router_group: str | None = None
    router_type: str | None = None  # its `router.type`; None in jobs begun before Dynamo: SGLang's

    def waits_for_router(self) -> bool:
        """A Dynamo worker: it starts once the router replica runs, told its address
        (docs/services.md#a-dynamo-router)."""
        return self.router_type == "dynamo" and self.group != self.router_group

    def syncs_router(self) -> bool:
        """An SGLang router replica, whose workers the worker keeps in step (activities.service_router)."""
        is_router = self.router_group is not None and self.group == self.router_group
        return is_router and self.router_type != "dynamo"


class RouterAddressRequest(Message):
    """Until the run's router replica runs: its address, as a Dynamo worker is told it
    (docs/services.md#a-dynamo-router)."""

    run_id: str
    router_group: str
    not_after: float  # past this the router has not run: the worker fails rather than wait on


class ProbeReplica(Message):
    """Register the replica (if it is not yet), probe it, and return once its state is not `known`."""

    job_submission_id: str
    run_id: str
    instance_name: str
    replica_num: int
    submission_num: int
    service: ServiceJob
    known: ReplicaState = ReplicaState.PROBING


class ReplicaReadiness(Message):
    state: ReplicaState
    detail: str  # the probes' last results, e.g. "GET /health: 200"


class DrainReplica(Message):
    """No new requests to the replica; wait (up to `grace` seconds) until no proxy has one in flight."""

    job_submission_id: str
    grace: float


class DrainResult(Message):
    drained: bool  # every live proxy said it has nothing in flight
    waited: float
    pending: list[str] = Field(default_factory=list)  # the proxies that had not said so


class WatchLoad(Message):
    """Measure a service's request rate until the autoscaler wants another replica count."""

    run_id: str
    rule: ScalingRule
    current: int
    last_change_at: float


class LoadChange(Message):
    desired: int
    rps: float
    group: str | None = None  # the replica group it is about (the workflow sets it); None: no groups
