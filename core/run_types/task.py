"""`type: task`: one replica of `nodes` jobs, each running the task's commands; or, with node groups, the
jobs of each group in turn, each with its group's commands, resources and ports (docs/runs.md#node-groups)."""

from __future__ import annotations

from core.configuration import TaskConfiguration
from core.run_types.base import RunConfigurator


class TaskConfigurator(RunConfigurator[TaskConfiguration]):
    def replica_count(self) -> int:
        return 1

    def nodes_per_replica(self) -> int:
        return self.configuration.nodes_num()

    def commands(self) -> list[str]:
        return list(self.configuration.commands)

    def node_groups(self) -> list[int]:
        # Without `groups`, the task's nodes are its one group (`${{ groups[0].nodes[j].IP_ADDRESS }}`).
        groups = self.configuration.groups
        return [self.configuration.nodes] if groups is None else [group.nodes for group in groups]

    def for_node(self, job_num: int) -> TaskConfigurator:
        groups = self.configuration.groups
        if groups is None:
            return self
        first = 0
        for group in groups:
            if job_num < first + group.nodes:
                break
            first += group.nodes
        else:
            raise IndexError(f"job {job_num} is in no node group: the task has {first} nodes")
        # The task as its node runs it: the group's fields, the task's nodes all counted.
        update = {
            "groups": None,
            "nodes": self.nodes_per_replica(),
            "commands": group.commands,
            "resources": group.resources,
            "ports": group.ports,
        }
        return TaskConfigurator(self.configuration.model_copy(update=update))
