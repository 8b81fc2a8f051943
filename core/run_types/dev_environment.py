"""`type: dev-environment`: one job that runs `init`, then stays up until stopped or its duration ends."""

from __future__ import annotations

from core.configuration import DevEnvironmentConfiguration
from core.run_types.base import RunConfigurator

KEEPALIVE_COMMAND = "sleep infinity"


class DevEnvironmentConfigurator(RunConfigurator[DevEnvironmentConfiguration]):
    def replica_count(self) -> int:
        return 1

    def nodes_per_replica(self) -> int:
        return 1

    def commands(self) -> list[str]:
        return [*self.configuration.init, KEEPALIVE_COMMAND]

    def inactivity_duration(self) -> int | None:
        return self.configuration.inactivity_duration
