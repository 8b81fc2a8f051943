"""Configurations as files write them (dstack's field names): task, service, dev-environment, fleet, volume,
and a backend (`type: slurm`, docs/backends.md).

`parse_configuration(data)` validates a parsed YAML mapping into one of the four models;
core.configuration.loading adds files, line numbers and readable errors on top.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, TypeAdapter

from core.configuration.backend import BackendConfiguration, SlurmBackendConfiguration
from core.configuration.base import DEFAULT_STOP_DURATION, BaseRunConfiguration, ConfigSummary, format_retry
from core.configuration.dev_environment import DevEnvironmentConfiguration
from core.configuration.fields import (
    InstanceVolume,
    NetworkVolume,
    PortMapping,
    StartupOrder,
    StopCriteria,
)
from core.configuration.fleet import FleetConfiguration, FleetNodes, ProxyJump, SSHConfig, SSHHost
from core.configuration.model import ConfigFieldError, ConfigModel
from core.configuration.service import ProbeSpec, ScalingSpec, ServiceConfiguration
from core.configuration.specs import ReplicaRange, Schedule
from core.configuration.task import TaskConfiguration
from core.configuration.volume import VolumeConfiguration

RunConfiguration = TaskConfiguration | ServiceConfiguration | DevEnvironmentConfiguration
# The configurations that are not runs: what a run is placed on, and how it is created.
NotARun = FleetConfiguration | VolumeConfiguration | SlurmBackendConfiguration

AnyConfiguration = Annotated[
    TaskConfiguration
    | ServiceConfiguration
    | DevEnvironmentConfiguration
    | FleetConfiguration
    | VolumeConfiguration
    | SlurmBackendConfiguration,
    Field(discriminator="type"),
]

# The `type` of each configuration and its model, in the order errors list them.
CONFIGURATION_MODELS: dict[str, type[ConfigModel]] = {
    "task": TaskConfiguration,
    "service": ServiceConfiguration,
    "dev-environment": DevEnvironmentConfiguration,
    "fleet": FleetConfiguration,
    "volume": VolumeConfiguration,
    "slurm": SlurmBackendConfiguration,
}
CONFIGURATION_TYPES: tuple[str, ...] = tuple(CONFIGURATION_MODELS)

_ADAPTER: TypeAdapter[AnyConfiguration] = TypeAdapter(AnyConfiguration)


def parse_configuration(data: Any) -> AnyConfiguration:
    """The configuration a parsed YAML document describes; pydantic.ValidationError if it is invalid."""
    return _ADAPTER.validate_python(data)


def known_field_names() -> frozenset[str]:
    """Every field name any configuration model (nested ones included) accepts, for typo suggestions."""
    names: set[str] = set()
    pending: list[type[BaseModel]] = list(CONFIGURATION_MODELS.values())
    seen: set[type] = set()
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, info in model.model_fields.items():
            names.add(name)
            pending.extend(models_in(info.annotation))
    return frozenset(names)


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's annotation holds (through unions, lists, Annotated), outermost first."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()) + getattr(annotation, "__metadata__", ()):
        found.extend(models_in(arg))
    if hasattr(annotation, "__origin__") and annotation.__origin__ is not None:
        found.extend(models_in(annotation.__origin__))
    return found


__all__ = [
    "CONFIGURATION_MODELS",
    "CONFIGURATION_TYPES",
    "DEFAULT_STOP_DURATION",
    "AnyConfiguration",
    "BackendConfiguration",
    "BaseRunConfiguration",
    "ConfigFieldError",
    "ConfigModel",
    "ConfigSummary",
    "DevEnvironmentConfiguration",
    "FleetConfiguration",
    "FleetNodes",
    "InstanceVolume",
    "NetworkVolume",
    "NotARun",
    "PortMapping",
    "ProbeSpec",
    "ProxyJump",
    "ReplicaRange",
    "RunConfiguration",
    "SSHConfig",
    "SSHHost",
    "SlurmBackendConfiguration",
    "ScalingSpec",
    "Schedule",
    "ServiceConfiguration",
    "StartupOrder",
    "StopCriteria",
    "TaskConfiguration",
    "VolumeConfiguration",
    "format_retry",
    "known_field_names",
    "models_in",
    "parse_configuration",
]
