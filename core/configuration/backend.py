"""`type: slurm`: a backend, the way a project's fleets create instances (docs/backends.md).

A backend file is applied once per project (`ferry apply -f slurm.yml`); a fleet with `nodes` then grows
and shrinks on it. The Slurm backend reaches the cluster through SSH to a login node and Slurm's own
commands there; each instance is a node of a Slurm allocation that runs Ferry's agent. The login key's
file is read at apply and kept sealed in the store, as secrets are (docs/secrets.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from core.configuration.base import ConfigSummary
from core.configuration.durations import OptionalDuration
from core.configuration.fleet import Hostname, ProxyJump
from core.configuration.model import ConfigFieldError, ConfigModel
from core.durations import format_duration

SLURM = "slurm"
BACKEND_TYPES: tuple[str, ...] = (SLURM,)

_SlurmWord = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.+-]+$")]


class SlurmPartition(ConfigModel):
    """A partition the backend may submit to; `preemptible` ones serve `spot_policy: spot` (and `auto`
    first), the others `on-demand` (and `auto` when no preemptible one can have it)."""

    name: _SlurmWord
    preemptible: bool = False
    qos: _SlurmWord | None = None  # None: the backend's `qos`


def _partition(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


class SlurmLogin(ConfigModel):
    """The login node, where `sbatch`, `squeue`, `scancel`, `sinfo` and `scontrol` run over SSH."""

    hostname: Hostname
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    user: Annotated[str, Field(min_length=1)]
    identity_file: Annotated[str, Field(min_length=1)]
    proxy_jump: ProxyJump | None = None


class SlurmBackendConfiguration(ConfigModel):
    type: Literal["slurm"] = "slurm"
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{1,40}$")] | None = None  # None: `slurm`
    login: SlurmLogin
    partitions: list[Annotated[SlurmPartition, BeforeValidator(_partition)]] = Field(min_length=1)
    account: _SlurmWord | None = None
    qos: _SlurmWord | None = None
    # The time limit each allocation asks for (`sbatch --time`); None: the partition's default.
    time_limit: OptionalDuration = None
    # Shared by the login node and the compute nodes (most clusters' home): the agent's bundle, each
    # allocation's token, its nodes' addresses and the agents' data (docs/backends.md#what-a-cluster-needs).
    directory: Annotated[str, Field(min_length=1)] = "~/.ferry-slurm"
    python: Annotated[str, Field(min_length=1)] = "python3"  # the compute nodes' own

    @model_validator(mode="after")
    def _check_partitions(self) -> SlurmBackendConfiguration:
        seen: set[str] = set()
        for index, partition in enumerate(self.partitions):
            if partition.name in seen:
                raise ConfigFieldError(["partitions", index, "name"], f"{partition.name} is listed twice")
            seen.add(partition.name)
        return self

    @property
    def backend_name(self) -> str:
        return self.name or SLURM

    def summary(self) -> ConfigSummary:
        partitions = ", ".join(p.name + (" (preemptible)" if p.preemptible else "") for p in self.partitions)
        limit = f", --time {format_duration(self.time_limit)}" if self.time_limit else ""
        return ConfigSummary(
            type="slurm backend",
            name=self.backend_name,
            resources="-",
            scale=f"login {self.login.user}@{self.login.hostname}: {partitions}{limit}",
            retry="-",
            schedule="-",
        )


BackendConfiguration = SlurmBackendConfiguration
