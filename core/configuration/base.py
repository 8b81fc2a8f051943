"""The fields every run configuration (task, service, dev environment) shares, with dstack's names."""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple, Self

from pydantic import Field, model_validator

from core.configuration.code_sources import FileMapping, RepoSpec
from core.configuration.durations import OptionalDuration
from core.configuration.fields import (
    Commands,
    CreationPolicy,
    Env,
    Name,
    Reference,
    SpotPolicy,
    StartupOrder,
    StopCriteria,
    VolumeMount,
)
from core.configuration.interpolation import (
    CREDENTIALS,
    ENV_VALUE,
    RUN_ARGS,
    Context,
    check_references,
    env_names,
    substitute,
)
from core.configuration.model import ConfigFieldError, ConfigModel
from core.configuration.notifications import NOTIFICATION_SECRET, NotificationSpec
from core.configuration.resources import ResourcesSpec
from core.configuration.retry import RetryPolicy
from core.configuration.specs import (
    Dependency,
    InstanceSelector,
    PythonVersion,
    RegistryAuth,
    Retry,
    Schedule,
    Shell,
    UtilizationPolicy,
)
from core.durations import format_duration

DEFAULT_STOP_DURATION = 300  # dstack: a graceful stop gets 5m before the job is killed
MAX_PRIORITY = 100

# Where and on what instances run, as dstack asks its cloud backends: Ferry places on the instances its
# fleets already have (SSH hosts, this machine) and creates none, so a fleet and a run share these.
CLOUD_FIELDS_NOT_ACTED_ON = frozenset(
    {
        "backends",
        "regions",
        "availability_zones",
        "instance_types",
        "reservation",
        "spot_policy",
        "max_price",
        "idle_duration",
        "tags",
        "backend_options",
    }
)

# Fields of every run that Ferry accepts but does not act on yet (each run type adds its own). `nvcc`:
# Ferry runs the user's `image` (or the official one of `python`), or `commands` on the host, and has no
# images of its own (docs/containers.md); `docker: true` is refused instead (core.configuration.runnable).
# `files`, `repos` and `single_branch` are all acted on (docs/runs.md#files, docs/runs.md#repos). The
# container's settings are acted on in a container only, with `image` or `python` (see asks_for); `image`,
# `python` and `volumes` always (docs/containers.md, docs/volumes.md). `resources.shm_size` is acted on
# either way: a container's --shm-size, or the least /dev/shm of a host job's instance (core.fleets.matching);
# so is `privileged`: a container's --privileged, or on the host an instance whose agent runs as root
# (core.runs.submissions, core.fleets.matching; docs/containers.md#privileged).
CONTAINER_FIELDS = frozenset({"user", "entrypoint", "registry_auth"})
RUN_FIELDS_NOT_ACTED_ON = (
    CLOUD_FIELDS_NOT_ACTED_ON
    | CONTAINER_FIELDS
    | {
        "nvcc",
        "creation_policy",
        # Deprecated in dstack, with no effect there either (but a dev environment's `setup`).
        "home_dir",
        "setup",
        # The matching of an instance's GPUs knows no compute capability (core.fleets.matching).
        "resources.gpu.compute_capability",
    }
)


class ConfigSummary(NamedTuple):
    """What `ferry validate` and `ferry apply` show of a configuration, one string per column."""

    type: str
    name: str
    resources: str
    scale: str  # nodes, replicas or hosts
    retry: str
    schedule: str


def format_retry(policy: RetryPolicy | None) -> str:
    if policy is None:
        return "off"
    return f"{', '.join(policy.on_events)} for {format_duration(policy.duration)}"


class BaseRunConfiguration(ConfigModel):
    NOT_ACTED_ON: ClassVar[frozenset[str]] = RUN_FIELDS_NOT_ACTED_ON

    name: Name | None = None  # None: a name is generated at apply time

    # What runs and how
    image: str | None = None
    python: PythonVersion | None = None
    nvcc: bool | None = None
    user: str | None = None
    privileged: bool = False
    entrypoint: str | None = None
    working_dir: str | None = None
    shell: Shell | None = None  # None: bash if the host has it, else sh
    env: Env = Field(default_factory=dict)
    registry_auth: RegistryAuth | None = None
    docker: bool | None = None
    repos: list[RepoSpec] = Field(default_factory=list)  # docs/runs.md#code
    files: list[FileMapping] = Field(default_factory=list)
    single_branch: bool | None = None
    dstack: bool = False  # the job may call Ferry's API (docs/teams.md#a-jobs-token)
    ferry: bool = False  # the same, by Ferry's name
    home_dir: str | None = None
    setup: Commands = Field(default_factory=list)

    # Where it runs
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    volumes: list[VolumeMount] = Field(default_factory=list)
    fleets: list[Reference] | None = None
    instances: list[InstanceSelector] | None = Field(default=None, min_length=1)
    backends: list[str] | None = None
    regions: list[str] | None = None
    availability_zones: list[str] | None = None
    instance_types: list[str] | None = None
    reservation: str | None = None
    spot_policy: SpotPolicy | None = None
    max_price: float | None = Field(default=None, gt=0)
    creation_policy: CreationPolicy | None = None
    idle_duration: OptionalDuration = None
    utilization_policy: UtilizationPolicy | None = None
    tags: dict[str, str] | None = None
    backend_options: list[dict[str, Any]] | None = None

    # Its life
    priority: int = Field(default=0, ge=0, le=MAX_PRIORITY)
    retry: Retry = None
    max_duration: OptionalDuration = None  # dstack: off unless set, for every run type
    stop_duration: OptionalDuration = DEFAULT_STOP_DURATION
    schedule: Schedule | None = None
    depends_on: list[Dependency] = Field(default_factory=list)  # docs/dependencies.md
    startup_order: StartupOrder = StartupOrder.ANY
    stop_criteria: StopCriteria = StopCriteria.ALL_DONE
    notifications: list[NotificationSpec] = Field(default_factory=list)  # docs/runs.md#notifications

    @model_validator(mode="after")
    def _check_image_and_python(self) -> BaseRunConfiguration:
        if self.image is not None and self.python is not None:
            raise ConfigFieldError(["python"], "cannot be used with `image`: the image decides the Python")
        return self

    @model_validator(mode="after")
    def _check_dependencies(self) -> BaseRunConfiguration:
        seen: set[str] = set()
        for index, dependency in enumerate(self.depends_on):
            if dependency.run == self.name:
                raise ConfigFieldError(["depends_on", index, "run"], "a run cannot depend on itself")
            if dependency.run in seen:
                raise ConfigFieldError(["depends_on", index, "run"], f"{dependency.run} is listed twice")
            seen.add(dependency.run)
        if self.depends_on and self.schedule is not None:
            # A schedule starts every cycle on its own time; waiting for another run has no cycle to hold.
            raise ConfigFieldError(["depends_on"], "cannot be used with `schedule`")
        return self

    @model_validator(mode="after")
    def _check_references(self) -> Self:
        """Every `${{ ... }}` is one its field takes (core.configuration.interpolation); `${{ env.NAME }}`
        names a variable of `env`. `${{ run.args }}` stays until the run is applied (with_run_args)."""
        for path, template, context in self.templates():
            try:
                check_references(template, context)
            except ValueError as exc:
                raise ConfigFieldError(path, str(exc)) from None
            for name in env_names(template):
                if name not in self.env:
                    raise ConfigFieldError(path, f"${{{{ env.{name} }}}}: `env` does not set {name}")
        return self

    def templates(self) -> Iterator[tuple[list[str | int], str, Context]]:
        """Each text that may hold `${{ ... }}`: its path, the text, and what it may refer to."""
        for key, value in self.env.items():
            if value is not None:
                yield ["env", key], value, ENV_VALUE
        if self.registry_auth is not None:
            yield ["registry_auth", "username"], self.registry_auth.username, CREDENTIALS
            yield ["registry_auth", "password"], self.registry_auth.password, CREDENTIALS
        for index, notification in enumerate(self.notifications):
            if notification.secret is not None:  # `ferry apply` refuses a secret not set
                yield ["notifications", index, "secret"], notification.secret, NOTIFICATION_SECRET

    def _command_lists(self) -> list[list[str]]:
        """The lists of commands `${{ run.args }}` is resolved in (a task's and a service's)."""
        return []

    def with_run_args(self, args: Sequence[str]) -> Self:
        """`${{ run.args }}` in the commands replaced by `args` as one shell-quoted string (`ferry apply
        -f FILE -- ARGS`, as dstack's `dstack apply ... ARGS`); nothing without them."""
        applied = self.model_copy(deep=True)
        for commands in applied._command_lists():
            commands[:] = [substitute(command, {RUN_ARGS: shlex.join(args)}) for command in commands]
        return applied

    def with_environment(self, environ: Mapping[str, str]) -> Self:
        """This configuration as it is applied: `env` resolved (resolved_env), each `${{ env.NAME }}`
        replaced by its value, and `${{ run.args }}` left by `with_run_args` empty; ValueError naming the
        variables `environ` lacks."""
        env = self.resolved_env(environ)
        values = {f"env.{key}": value for key, value in env.items()}
        return self.with_run_args([]).model_copy(update={"env": env, **self._env_references(values)})

    def _env_references(self, values: Mapping[str, str]) -> dict[str, Any]:
        """The fields holding `${{ env.NAME }}`, with it replaced (for model_copy)."""
        if self.registry_auth is None:
            return {}
        auth = self.registry_auth
        update = {
            "username": substitute(auth.username, values),
            "password": substitute(auth.password, values),
        }
        return {"registry_auth": auth.model_copy(update=update)}

    def unresolved_env(self) -> list[str]:
        """Variables written as a bare `NAME`: their values come from the environment at apply time."""
        return [key for key, value in self.env.items() if value is None]

    def resolved_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """`env` with every bare `NAME` taken from `environ`; ValueError naming the ones it lacks."""
        missing = [key for key in self.unresolved_env() if key not in environ]
        if missing:
            raise ValueError(f"env: {', '.join(missing)} not set in the environment")
        return {key: environ[key] if value is None else value for key, value in self.env.items()}

    def calls_api(self) -> bool:
        """`dstack: true`, or `ferry: true`: the job calls Ferry's API (docs/teams.md#a-jobs-token)."""
        return self.dstack or self.ferry

    def asks_for(self, field: str) -> bool:
        if field in CONTAINER_FIELDS and (self.image is not None or self.python is not None):
            return False  # the container executor acts on it
        return super().asks_for(field)

    def _needs_commands(self, commands: list[str]) -> None:
        # dstack runs the image's entrypoint when no commands are given; without an image there is nothing.
        if not commands and self.image is None:
            raise ConfigFieldError(["commands"], "required: list the commands to run (or set `image`)")

    def _summary(self, kind: str, scale: str) -> ConfigSummary:
        return ConfigSummary(
            type=kind,
            name=self.name or "-",
            resources=self.resources.pretty(),
            scale=scale,
            retry=format_retry(self.retry),
            schedule=", ".join(self.schedule.cron) if self.schedule else "-",
        )
