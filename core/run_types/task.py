"""`type: task`: one replica of `nodes` jobs, each running the task's commands."""

from __future__ import annotations

from core.configuration import TaskConfiguration
from core.run_types.base import RunConfigurator


class TaskConfigurator(RunConfigurator[TaskConfiguration]):
    def replica_count(self) -> int:
        return 1

    def nodes_per_replica(self) -> int:
        return self.configuration.nodes

    def commands(self) -> list[str]:
        return list(self.configuration.commands)
