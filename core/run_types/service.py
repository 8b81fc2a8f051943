"""`type: service`: replicas of one job each, running the service's commands."""

from __future__ import annotations

from core.configuration import ServiceConfiguration
from core.run_types.base import RunConfigurator
from core.wire.services import ServiceJob


class ServiceConfigurator(RunConfigurator[ServiceConfiguration]):
    group: str | None = None  # the group of the replicas it configures (for_group)

    def replica_count(self) -> int:
        return sum(group.starting_count for group in self.configuration.groups)

    def for_group(self, group: str | None) -> ServiceConfigurator:
        """The configurator of one replica group's jobs: the service with the group's commands and
        resources, and its own image (or Python) and `privileged` where it names them
        (docs/services.md#replica-groups)."""
        if group is None:
            return self
        spec = self.configuration.group(group)
        update: dict[str, object] = {"commands": spec.commands, "resources": spec.resources}
        if spec.has_own_container:
            update |= {"image": spec.image, "python": spec.python}
        if spec.privileged is not None:
            update["privileged"] = spec.privileged
        configurator = ServiceConfigurator(self.configuration.model_copy(update=update))
        configurator.group = group
        return configurator

    def nodes_per_replica(self) -> int:
        return 1

    def commands(self) -> list[str]:
        return list(self.configuration.commands)

    def service_job(self) -> ServiceJob:
        return ServiceJob(
            port=self.configuration.port.container_port,
            probes=list(self.configuration.probes),
            group=self.group,
            router_group=self.configuration.router_group,
            router_type=self.configuration.router_type,
        )
