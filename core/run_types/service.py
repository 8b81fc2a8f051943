"""`type: service`: replicas of one job each, running the service's commands."""

from __future__ import annotations

from core.configuration import ServiceConfiguration
from core.run_types.base import RunConfigurator
from core.wire.services import ServiceJob


class ServiceConfigurator(RunConfigurator[ServiceConfiguration]):
    def replica_count(self) -> int:
        # The lower bound of `replicas`, but at least one: a service scaled to zero still starts one.
        return max(self.configuration.replicas.min or 0, 1)

    def nodes_per_replica(self) -> int:
        return 1

    def commands(self) -> list[str]:
        return list(self.configuration.commands)

    def service_job(self) -> ServiceJob:
        return ServiceJob(port=self.configuration.port.container_port, probes=list(self.configuration.probes))
