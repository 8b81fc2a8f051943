"""The store's tables: runs, job submissions, eventlogs, log chunks, code archives, fleets, instances and
volumes (and the services', below), and the projects' secrets, sealed.

Every table has a migration in `store/migrations/versions`; a test checks that the two agree.
There are no foreign keys on purpose: workers write records in whatever order their activities
(and the retries of those activities) happen to run, so a job's events or logs may land before its
submission record does.
"""

import json
import time
from typing import Any

from sqlalchemy import BigInteger, Index, Integer, LargeBinary, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from core.configuration import BaseRunConfiguration, parse_configuration
from core.configuration.pipeline import PIPELINE_TYPE
from core.eventlog import Event

# SQLite only autoincrements an INTEGER PRIMARY KEY (the rowid); elsewhere the append-only tables
# get 64-bit ids, as they may well outgrow 2**31 rows over a long-lived server's life.
_BIG_ID = BigInteger().with_variant(Integer(), "sqlite")

# The job_submission_id of a run's own eventlog. NULL would not do: NULLs never conflict in a
# UNIQUE constraint (SQLite, PostgreSQL), so a retried append could store the run's events twice.
RUN_EVENTLOG = ""


class RunRecord(SQLModel, table=True):
    """One applied configuration: what `ferry ps` lists."""

    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_project_run_name", "project", "run_name"),)

    id: str = Field(primary_key=True)  # the run id, given by the caller; a run name may be reused
    project: str
    run_name: str
    user: str
    type: str  # task, service or dev-environment
    status: str = Field(index=True)  # a core.status.RunStatus value
    termination_reason: str | None = None  # a core.status.RunTerminationReason value
    status_message: str | None = Field(default=None, sa_type=Text)
    configuration: str = Field(default="{}", sa_type=Text)  # JSON of the normalised configuration
    code_hash: str | None = None  # a CodeArchiveRecord.hash
    submitted_at: float = Field(default_factory=time.time)
    finished_at: float | None = None
    updated_at: float = Field(default_factory=time.time)
    priority: int = 0
    workflow_id: str  # the RunWorkflow's id, ferry/<project>/<run-name>
    # A task of a pipeline (docs/pipelines.md): the pipeline's run id and the task's place (1, 2...). Such
    # a run is listed and found only through its pipeline.
    pipeline_id: str | None = Field(default=None, index=True)
    task_num: int | None = None
    # The place among the run workflow's writes of the last one that stored its events, when it writes from
    # its workflow task (Store.record_changes, docs/runs.md#the-store): a later write replaces what an
    # earlier one stored from its first event on, and an earlier one arriving late changes nothing.
    write_order: int | None = Field(default=None, sa_type=BigInteger)

    def configuration_data(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.configuration)
        return data

    def run_configuration(self) -> BaseRunConfiguration | None:
        """Its configuration as submitted (or last deployed): a task's, a service's or a dev environment's;
        None for a pipeline's run (its tasks are runs of their own). Raises ValueError if the stored JSON no
        longer validates."""
        if self.type == PIPELINE_TYPE:
            return None
        parsed = parse_configuration(self.configuration_data())
        if not isinstance(parsed, BaseRunConfiguration):
            raise ValueError(f"run {self.run_name} has a {self.type} configuration stored")
        return parsed


class JobSubmissionRecord(SQLModel, table=True):
    """One attempt at one job (one node of one replica): a JobWorkflow."""

    __tablename__ = "job_submissions"

    id: str = Field(primary_key=True)  # the JobWorkflow's id, <run-id>/r<replica>/j<job>/s<submission>
    run_id: str = Field(index=True)
    replica_num: int = 0
    job_num: int = 0
    submission_num: int = 0
    status: str  # a core.status.JobStatus value
    termination_reason: str | None = None  # a core.status.JobTerminationReason value
    termination_message: str | None = Field(default=None, sa_type=Text)
    exit_status: int | None = None
    instance_name: str | None = None
    submitted_at: float = Field(default_factory=time.time)
    provisioned_at: float | None = None
    finished_at: float | None = None
    status_message: str | None = Field(default=None, sa_type=Text)  # "waiting for capacity" while queued
    # Bytes of log stored so far. The store keeps it in step with the log chunks: Store.append_log
    # raises it, and Store.put_job_submission ignores whatever value the caller's record carries.
    log_size: int = Field(default=0, sa_type=BigInteger)


class EventRecord(SQLModel, table=True):
    """One event of an eventlog: a job submission's, or the run's own (job_submission_id == "")."""

    __tablename__ = "events"
    # The unique index also serves every lookup by run_id, so run_id needs no index of its own.
    __table_args__ = (UniqueConstraint("run_id", "job_submission_id", "seq", name="uq_events_run_job_seq"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=_BIG_ID)
    run_id: str
    job_submission_id: str = RUN_EVENTLOG
    seq: int  # the event's index within its eventlog
    timestamp: float
    name: str
    context: str = Field(default="{}", sa_type=Text)  # JSON object

    def context_data(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.context)
        return data

    def to_event(self) -> Event:
        return Event(timestamp=self.timestamp, name=self.name, context=self.context_data())


class LogChunkRecord(SQLModel, table=True):
    """A piece of a job submission's log; the chunks of one log tile it from byte 0 without gaps."""

    __tablename__ = "log_chunks"
    # The unique index also serves every lookup by job_submission_id.
    __table_args__ = (UniqueConstraint("job_submission_id", "offset", name="uq_log_chunks_job_offset"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=_BIG_ID)
    job_submission_id: str
    offset: int = Field(sa_type=BigInteger)  # the byte offset of the chunk's first byte in the log
    data: bytes = Field(sa_type=LargeBinary)
    timestamp: float


class CodeArchiveRecord(SQLModel, table=True):
    """A run's code, content-addressed: the same archive is stored once, whoever submits it."""

    __tablename__ = "code_archives"

    hash: str = Field(primary_key=True)  # "sha256:<hex>" of data
    data: bytes = Field(sa_type=LargeBinary)
    size: int = Field(sa_type=BigInteger)
    created_at: float = Field(default_factory=time.time)


class FleetRecord(SQLModel, table=True):
    """A fleet: an applied `type: fleet` configuration (SSH hosts), or a project's local fleet."""

    __tablename__ = "fleets"
    __table_args__ = (Index("ix_fleets_project_status", "project", "status"),)

    id: str = Field(primary_key=True)  # <project>/<name>: a name is unique within its project
    project: str
    name: str
    backend: str  # ssh or local
    configuration: str = Field(default="{}", sa_type=Text)  # JSON of the FleetConfiguration ({} for local)
    status: str  # active, deleting or deleted
    workflow_id: str  # its FleetWorkflow, ferry/<project>/fleet/<name>
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)

    def configuration_data(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.configuration)
        return data


class InstanceRecord(SQLModel, table=True):
    """An instance of a fleet as its scheduler last recorded it: `ferry fleet list`, and how a worker
    finds a host it has not deployed itself (the fleet's configuration says how to reach it)."""

    __tablename__ = "instances"
    __table_args__ = (Index("ix_instances_project_fleet", "project", "fleet"),)

    id: str = Field(primary_key=True)  # <project>/<instance name>
    project: str
    fleet: str
    name: str = Field(index=True)
    address: str  # the IP the other nodes of a multi-node job reach it at
    status: str  # ready, unreachable or deleted
    status_message: str | None = Field(default=None, sa_type=Text)
    resources: str = Field(default="{}", sa_type=Text)  # JSON of its total: {cpu, memory, gpu}
    blocks: int | None = None  # None: shared by exact needs (the local instance)
    busy_blocks: int = 0
    jobs: int = 0  # jobs placed on it now
    in_use: str = Field(default="{}", sa_type=Text)  # JSON of what its jobs hold: {cpu, memory, gpu}
    # JSON of what it is, as its agent last described it: {hardware, container_engine, agent_release}
    description: str = Field(default="{}", sa_type=Text)
    updated_at: float = Field(default_factory=time.time)

    def resources_data(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.resources)
        return data

    def in_use_data(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.in_use or "{}")
        return data

    def description_data(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.description or "{}")
        return data


class QueuedJobRecord(SQLModel, table=True):
    """A job its fleet holds in its queue, as the fleet last recorded it (`put_queue`): `ferry ps` says
    it waits for capacity. The fleet writes its whole queue at most every 2 s, where telling each job
    cost a dozen history events per job (docs/fleets.md#the-queue-in-the-store)."""

    __tablename__ = "queued_jobs"

    project: str = Field(primary_key=True)
    fleet: str = Field(primary_key=True)
    job_submission_id: str = Field(primary_key=True, index=True)
    # The job as its id names it: a job that waits may have no record of its own yet (its run writes it
    # with the job's first news), and `ferry ps` shows it all the same.
    run_id: str = Field(index=True)
    replica_num: int
    job_num: int
    submission_num: int
    reason: str | None = Field(default=None, sa_type=Text)  # what it waits for, where the fleet knows more
    position: int  # 1: the job served next


class VolumeRecord(SQLModel, table=True):
    """A named volume (docs/volumes.md): a directory on one instance of a fleet, attached to one job at a
    time (`attached_to`, set and cleared by the job's attach_volumes and detach_volumes activities)."""

    __tablename__ = "volumes"
    __table_args__ = (Index("ix_volumes_project", "project"),)

    id: str = Field(primary_key=True)  # <project>/<name>
    project: str
    name: str
    fleet: str
    instance: str
    configuration: str = Field(default="{}", sa_type=Text)  # JSON of the VolumeConfiguration
    attached_to: str | None = Field(default=None, index=True)  # a job submission id
    attached_at: float | None = None
    created_at: float = Field(default_factory=time.time)


class ServiceReplicaRecord(SQLModel, table=True):
    """A service replica the proxies may route to: its job submission, where it listens, and its probes.

    Written by the worker that probes it (activities.services); read by every proxy (gateway/). A row
    exists from the job's start to its end; only a `ready` replica gets new requests (docs/services.md).
    """

    __tablename__ = "service_replicas"

    id: str = Field(primary_key=True)  # the job submission id
    run_id: str = Field(index=True)
    replica_num: int
    submission_num: int
    deployment_num: int = 0
    url: str  # http://host:port, what the proxies forward to
    # How the worker and the proxies reach `url`: NULL directly; a backend's id (`project/name`,
    # store.backend_repository.backend_id) through that backend's login node, for a replica on a compute node
    # of a private network (docs/services.md#replicas-behind-a-login-node).
    via: str | None = None
    state: str  # a core.services.replicas.ReplicaState value: probing, ready, unready or draining
    # Its replica group: of a service with a router group, the proxies route to that group's replicas only
    # (docs/services.md#a-router-group). NULL: the single form, or registered before groups were kept.
    group_name: str | None = None
    probes: str = Field(default="[]", sa_type=Text)  # JSON list of core.services.probes.ProbeStatus
    registered_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)


class GatewayRecord(SQLModel, table=True):
    """A running proxy: drains wait for every proxy seen lately, and the CLI prints a live one's URL."""

    __tablename__ = "gateways"

    id: str = Field(primary_key=True)
    url: str  # where users reach it, e.g. http://127.0.0.1:8300
    started_at: float = Field(default_factory=time.time)
    seen_at: float = Field(default_factory=time.time)  # its last heartbeat


class ReplicaDrainRecord(SQLModel, table=True):
    """A proxy's word that it sends a draining replica nothing more and has no request in flight to it."""

    __tablename__ = "replica_drains"
    __table_args__ = (UniqueConstraint("replica_id", "gateway_id", name="uq_replica_drains"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=_BIG_ID)
    replica_id: str
    gateway_id: str
    drained_at: float = Field(default_factory=time.time)


class ServiceRequestsRecord(SQLModel, table=True):
    """Requests one proxy received for one service in one second: the autoscaler's figures."""

    __tablename__ = "service_requests"
    __table_args__ = (
        UniqueConstraint("run_id", "gateway_id", "second", name="uq_service_requests"),
        Index("ix_service_requests_second", "second"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=_BIG_ID)
    run_id: str
    gateway_id: str
    second: int = Field(sa_type=BigInteger)  # unix time, whole seconds
    count: int


class SecretRecord(SQLModel, table=True):
    """A project's secret (`ferry secret`, docs/secrets.md): its value sealed with Ferry's key
    (store/keys.py), bound to its id, so that the store never holds it in clear nor a row passes for
    another's."""

    __tablename__ = "secrets"
    __table_args__ = (Index("ix_secrets_project", "project"),)

    id: str = Field(primary_key=True)  # <project>/<name>
    project: str
    name: str
    key_id: str  # the key that sealed it
    sealed: bytes = Field(sa_type=LargeBinary)  # nonce, ciphertext and tag
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    updated_by: str | None = None  # who set its value last (None: before Ferry recorded it)


class BackendRecord(SQLModel, table=True):
    """A project's backend (`ferry apply -f slurm.yml`, docs/backends.md): its configuration, and the login
    key it names sealed with Ferry's key (store/keys.py) as secrets are, bound to its id."""

    __tablename__ = "backends"
    __table_args__ = (Index("ix_backends_project", "project"),)

    id: str = Field(primary_key=True)  # <project>/<name>
    project: str
    name: str
    type: str  # `slurm`
    configuration: str = Field(sa_type=Text)  # the configuration's JSON
    key_id: str  # the key that sealed the login key
    sealed: bytes = Field(sa_type=LargeBinary)  # the login's private key: nonce, ciphertext and tag
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)

    def configuration_data(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.configuration)
        return data


# Users, projects and members (docs/teams.md): their own module, registered with the others.
from store.team_models import ChangeRecord as ChangeRecord  # noqa: E402
from store.team_models import MemberRecord as MemberRecord  # noqa: E402
from store.team_models import ProjectRecord as ProjectRecord  # noqa: E402
from store.team_models import RunTokenRecord as RunTokenRecord  # noqa: E402
from store.team_models import UserRecord as UserRecord  # noqa: E402
