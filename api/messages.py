"""What the API's routes take and answer (docs/teams.md#the-api); the CLI reads the same models."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from cli.services import ServiceView
from cli.stuck import StuckWorkflow
from core.configuration import FleetConfiguration, RunConfiguration, SlurmBackendConfiguration
from core.fleets.messages import FleetDescription
from core.teams.roles import GlobalRole, ProjectRole
from core.wire.messages import SSHEndpoint
from core.wire.run_messages import DeployReply
from store import FleetRecord, InstanceRecord, JobSubmissionRecord, RunRecord

# A user's or a project's name: what a command line and a URL path carry without quoting.
_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


def _checked_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            f"invalid name {value!r}: use 1 to 64 lowercase letters, digits, '_', '.' and '-', "
            "starting with a letter"
        )
    return value


Name = Annotated[str, AfterValidator(_checked_name)]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Refusal(Message):
    """Every answer that is not a success: one line, the reason (401, 403, 404, 409, 422)."""

    detail: str


# What a run route may answer besides its success, each one line (docs/teams.md#the-api): a body that is
# not JSON (400), no token (401), a role that does not allow it (403), what is not there (404), a conflict
# (409), code too big (413), a field that does not parse (422), no Temporal reached (503).
RUN_REFUSALS: dict[int | str, dict[str, object]] = {
    status: {"model": Refusal} for status in (400, 401, 403, 404, 409, 413, 422, 503)
}


class Me(Message):
    name: str
    role: GlobalRole
    projects: dict[str, ProjectRole]


class UserInfo(Message):
    name: str
    role: GlobalRole
    has_token: bool  # False: revoked
    created_at: float


class NewUser(Message):
    name: Name
    role: GlobalRole = GlobalRole.USER


class RoleChange(Message):
    role: GlobalRole


class IssuedToken(Message):
    """A token, shown this once: the store keeps only its hash."""

    user: str
    token: str


class ProjectInfo(Message):
    name: str
    created_by: str | None
    created_at: float


class NewProject(Message):
    name: Name


class MemberInfo(Message):
    user: str
    role: ProjectRole


class MemberRole(Message):
    role: ProjectRole


class RunSubmission(Message):
    """A run to start (`ferry apply`): its configuration with `env` as applied where the user applied it,
    and its code, sent first (`POST /api/projects/{p}/code`)."""

    configuration: RunConfiguration
    run_name: str | None = None
    code_hash: str
    code_name: str
    authorized_keys: list[str] = Field(
        default_factory=list
    )  # the user's, for `ferry attach` (docs/attach.md)


class RunChecks(Message):
    """What `ferry apply` checks before it stops an active run of the name: its dependencies and secrets."""

    configuration: RunConfiguration


class StoredCode(Message):
    code_hash: str


class SubmittedRun(Message):
    run: RunRecord
    notes: list[str]  # lines to show the user: where a service answers (docs/services.md)


class DeployedRun(Message):
    reply: DeployReply
    notes: list[str]


class LiveAsk(Message):
    """What `ferry ps` asks beside the store's records: of these runs, which are stuck; of these jobs,
    their SSH connections (dev environments) and their image pulls."""

    runs: list[str] = Field(default_factory=list, max_length=10_000)
    connections: list[str] = Field(default_factory=list, max_length=1_000)
    pulls: list[str] = Field(default_factory=list, max_length=1_000)


class LiveNews(Message):
    services: dict[str, ServiceView]  # by run id: the service's URL and its replicas' probes
    stuck: dict[str, StuckWorkflow]  # by run id
    connections: dict[str, SSHEndpoint | None]  # by job id; None: its agent did not answer
    pulls: dict[str, str]  # by job id


class RunPlan(Message):
    """What `ferry apply`'s plan shows of a submission before it is made: who submits it, and where it
    would run (the fleet the submission would choose, or why it would be refused)."""

    user: str
    runs_on: str


class DeletedRun(Message):
    jobs: int  # job submissions whose records, events and logs are gone
    executions: int  # Temporal workflow executions deleted (Temporal removes them within seconds)


class RunRow(Message):
    """A row of `ferry ps`'s table: a run and its jobs (a pipeline's latest task's)."""

    run: RunRecord
    jobs: list[JobSubmissionRecord]


class SecretInfo(Message):
    """A secret as `ferry secret list` shows it: never its value."""

    name: str
    key: str  # the id of the key that sealed it
    created_at: float
    updated_at: float
    updated_by: str | None  # None: set before Ferry recorded who


class SecretValue(Message):
    value: str


class SecretSet(Message):
    name: str
    created: bool  # False: an existing secret's value changed


class RepoCredential(Message):
    """A private repo's token, or SSH private key (`ssh_key`), for jobs that clone its URL."""

    url: str
    value: str
    ssh_key: bool = False


class ChangeInfo(Message):
    """One change of a project's thing, and who made it (docs/teams.md#who-did-it)."""

    at: float
    actor: str
    subject: str
    name: str
    change: str


class VolumeInfo(Message):
    """A named volume as `ferry volume list` shows it."""

    name: str
    fleet: str
    instance: str
    attached_to: str | None  # the job that holds it
    created_at: float


class NewVolume(Message):
    """`ferry volume create` or `ferry apply -f volume.yml`: the configuration, and the name that `-n` gave
    in place of its own."""

    configuration: dict[str, object]
    name: str | None = None


class CreatedVolume(Message):
    volume: VolumeInfo
    created: bool  # False: the same volume was there, unchanged


class FleetRow(Message):
    """A fleet and its instances, as `ferry fleet list` shows them (the store's records)."""

    fleet: FleetRecord
    instances: list[InstanceRecord]


class FleetApplication(Message):
    """`ferry apply -f fleet.yml`: the configuration with `env` as applied where the user applied it, and
    the name that `-n` gave in place of its own."""

    configuration: FleetConfiguration
    name: str | None = None


class FleetPlan(Message):
    backend: str | None  # the backend that creates its instances; None: its SSH hosts are given


class AppliedFleet(Message):
    fleet: FleetRecord
    created: bool  # False: the same fleet was there, unchanged


class DeletedFleet(Message):
    """A fleet being deleted, as its scheduler described it then (None: it was not running)."""

    described: FleetDescription | None


class NewPriority(Message):
    priority: int


class BackendInfo(Message):
    """A backend as `ferry backend list` shows it: never its login key."""

    name: str
    type: str
    where: str  # its login node and partitions


class BackendApplication(Message):
    """`ferry apply -f slurm.yml`: the configuration and the login key its `identity_file` names, read
    where the user applied it."""

    configuration: SlurmBackendConfiguration
    login_key: str


class AppliedBackend(Message):
    name: str
    partitions: list[str]


class OfferAsk(Message):
    """`ferry offer -f FILE`: where a run of this configuration could go now."""

    configuration: RunConfiguration
