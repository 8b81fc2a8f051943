"""Run types as configurators: `configurator_for(configuration)` is what a run's type decides for its jobs."""

from __future__ import annotations

from typing import Any

from core.configuration import RunConfiguration
from core.run_types.base import UNLIMITED_GRACE, RunConfigurator
from core.run_types.dev_environment import DevEnvironmentConfigurator
from core.run_types.service import ServiceConfigurator
from core.run_types.task import TaskConfigurator

# By the configuration's `type`, as configuration files spell it.
CONFIGURATORS: dict[str, type[RunConfigurator[Any]]] = {
    "task": TaskConfigurator,
    "service": ServiceConfigurator,
    "dev-environment": DevEnvironmentConfigurator,
}


def configurator_for(configuration: RunConfiguration) -> RunConfigurator[Any]:
    configurator = CONFIGURATORS.get(configuration.type)
    if configurator is None:
        # TypeError, as for any value of the wrong type: a fleet configuration has no jobs.
        raise TypeError(f"not a run configuration: type {configuration.type!r}")
    return configurator(configuration)


__all__ = [
    "CONFIGURATORS",
    "UNLIMITED_GRACE",
    "DevEnvironmentConfigurator",
    "RunConfigurator",
    "ServiceConfigurator",
    "TaskConfigurator",
    "configurator_for",
]
