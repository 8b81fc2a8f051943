"""`type: fleet`: the instances runs are placed on, either SSH hosts (`ssh_config`) or `nodes`."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Discriminator, Field, Tag, model_validator

from core.configuration.base import CLOUD_FIELDS_NOT_ACTED_ON, ConfigSummary, format_retry
from core.configuration.durations import OptionalDuration
from core.configuration.fields import Env, Name, SpotPolicy
from core.configuration.model import ConfigFieldError, ConfigModel, shape_of
from core.configuration.resources import ResourcesSpec
from core.configuration.specs import Retry, parse_int_range

_PortNumber = Annotated[int, Field(ge=1, le=65535)]

Blocks = Annotated[
    Annotated[int, Field(ge=1), Tag("<number>")] | Annotated[Literal["auto"], Tag("<string>")],
    Discriminator(
        shape_of, custom_error_type="blocks_shape", custom_error_message="expected a number of blocks or auto"
    ),
]


def _check_hostname(value: str) -> str:
    if not value or any(ch.isspace() for ch in value) or "@" in value:
        raise ValueError(f"expected a hostname or an IP address (the user goes in `user`), got {value!r}")
    return value


Hostname = Annotated[str, AfterValidator(_check_hostname)]


class ProxyJump(ConfigModel):
    """The host SSH connections go through first."""

    hostname: Hostname
    port: _PortNumber | None = None
    user: str | None = None
    identity_file: str | None = None


class SSHHost(ConfigModel):
    """One host of an SSH fleet; unset fields come from `ssh_config`."""

    hostname: Hostname
    port: _PortNumber | None = None
    user: str | None = None
    identity_file: str | None = None
    proxy_jump: ProxyJump | None = None
    internal_ip: str | None = None
    blocks: Blocks | None = None  # None: the fleet's `blocks`


def _host(value: Any) -> Any:
    return {"hostname": value} if isinstance(value, str) else value


def _check_network(value: str) -> str:
    try:
        ipaddress.ip_network(value)
    except ValueError as exc:
        raise ValueError(f"expected a network such as 10.0.0.0/24: {exc}") from None
    return value


class SSHConfig(ConfigModel):
    user: str | None = None
    port: _PortNumber | None = None
    identity_file: str | None = None
    proxy_jump: ProxyJump | None = None
    network: Annotated[str, AfterValidator(_check_network)] | None = None
    hosts: list[Annotated[SSHHost, BeforeValidator(_host)]] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_hosts(self) -> SSHConfig:
        seen: set[tuple[str, int | None]] = set()
        for index, host in enumerate(self.hosts):
            if host.user is None and self.user is None:
                raise ConfigFieldError(
                    ["hosts", index], "no user to log in as: set `user` here or in ssh_config"
                )
            address = (host.hostname, host.port or self.port)
            if address in seen:
                raise ConfigFieldError(["hosts", index, "hostname"], f"{host.hostname} is listed twice")
            seen.add(address)
        return self


class FleetNodes(ConfigModel):
    """How many instances a fleet of `nodes` has: at least `min`, `target` at creation, at most `max`."""

    min: int = Field(ge=0)
    target: int = Field(ge=0)
    max: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check_order(self) -> FleetNodes:
        if self.target < self.min:
            raise ConfigFieldError(["target"], f"below the minimum ({self.min})")
        if self.max is not None and self.max < self.target:
            raise ConfigFieldError(["max"], f"below the target ({self.target})")
        return self

    def __str__(self) -> str:
        if self.min == self.target == self.max:
            return str(self.min)
        return f"{self.min}..{'' if self.max is None else self.max}"


def _nodes(value: Any) -> Any:
    parsed = parse_int_range(value, "nodes")
    if parsed is None:
        if isinstance(value, dict) and "min" not in value:
            value = {**value, "min": 0}  # dstack: a fleet of `max` nodes starts empty
        if isinstance(value, dict) and "target" not in value and isinstance(value.get("min"), int):
            return {**value, "target": value["min"]}
        if isinstance(value, dict | FleetNodes):
            return value
        raise ValueError(f"expected a number of nodes or a range such as 0..2, got {value!r}")
    low, high = parsed
    if low is not None and low == high and low < 1:
        raise ValueError("a fixed number of nodes must be at least 1 (a range such as 0..2 can start empty)")
    return {"min": low or 0, "target": low or 0, "max": high}


# What a fleet with `nodes` acts on, of the fields an SSH fleet does not (docs/backends.md#elastic-fleets).
ELASTIC_FIELDS = frozenset({"backends", "spot_policy", "idle_duration", "placement"})


class FleetConfiguration(ConfigModel):
    # `retry` and the termination fields are about the instances a cloud backend would create. `env` is
    # given to every job placed on the fleet's instances, under the run's own (core.fleets.book).
    # An SSH fleet's `placement: cluster` is acted on: each host must reach the others on a network they
    # share (`ssh_config.network`, where it names one), and its address there is the one the other nodes
    # get (core.fleets.cluster, docs/fleets.md#cluster-placement); without `cluster`, `network` is warned.
    # A fleet with `nodes` acts on ELASTIC_FIELDS (core.fleets.provisioning); a backend is asked for no
    # /dev/shm size (`resources.shm_size`: a job's is matched at placement,
    # docs/fleets.md#placement-and-blocks).
    NOT_ACTED_ON: ClassVar[frozenset[str]] = CLOUD_FIELDS_NOT_ACTED_ON | {
        "resources.shm_size",
        "ssh_config.network",
        "retry",
        "termination_policy",
        "termination_idle_time",
        "resources.gpu.compute_capability",
    }

    type: Literal["fleet"] = "fleet"
    name: Name | None = None
    env: Env = Field(default_factory=dict)
    ssh_config: SSHConfig | None = None
    nodes: Annotated[FleetNodes, BeforeValidator(_nodes)] | None = None
    placement: Literal["any", "cluster"] = "any"
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    blocks: Blocks = 1  # how many parts each instance's GPUs, CPUs and memory are split into
    backends: list[str] | None = None
    regions: list[str] | None = None
    availability_zones: list[str] | None = None
    instance_types: list[str] | None = None
    reservation: str | None = None
    spot_policy: SpotPolicy | None = None
    retry: Retry = None
    max_price: float | None = Field(default=None, gt=0)
    idle_duration: OptionalDuration = None
    tags: dict[str, str] | None = None
    backend_options: list[dict[str, Any]] | None = None
    termination_policy: Literal["dont-destroy", "destroy-after-idle"] | None = None
    termination_idle_time: OptionalDuration = None

    @model_validator(mode="after")
    def _check_kind(self) -> FleetConfiguration:
        if self.ssh_config is None and self.nodes is None:
            raise ConfigFieldError(["nodes"], "required: a fleet needs `nodes` or `ssh_config.hosts`")
        if self.ssh_config is not None and self.nodes is not None:
            raise ConfigFieldError(
                ["nodes"], "cannot be used with `ssh_config`: an SSH fleet has one instance per host"
            )
        return self

    def resolved_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """`env` with every bare `NAME` taken from `environ` (as a run's, at apply time); ValueError naming
        the ones it lacks."""
        missing = [key for key, value in self.env.items() if value is None and key not in environ]
        if missing:
            raise ValueError(f"env: {', '.join(missing)} not set in the environment")
        return {key: environ[key] if value is None else value for key, value in self.env.items()}

    @property
    def is_ssh(self) -> bool:
        return self.ssh_config is not None

    def asks_for(self, field: str) -> bool:
        if field == "ssh_config.network":  # acted on by `placement: cluster` only
            return self.placement != "cluster" and super().asks_for(field)
        return super().asks_for(field)

    def unsupported_fields(self) -> list[str]:
        fields = super().unsupported_fields()
        if not self.is_ssh:
            fields = [field for field in fields if field not in ELASTIC_FIELDS]
        # An SSH fleet's resources are what its hosts have: a request there asks for nothing.
        if self.is_ssh and "resources" in self.model_fields_set:
            fields.append("resources")
        return fields

    def summary(self) -> ConfigSummary:
        if self.ssh_config is not None:
            resources, scale = "-", f"hosts {len(self.ssh_config.hosts)}"
        else:
            resources, scale = self.resources.pretty(), f"nodes {self.nodes}"
        return ConfigSummary(
            type="fleet",
            name=self.name or "-",
            resources=resources,
            scale=scale,
            retry=format_retry(self.retry),
            schedule="-",
        )
