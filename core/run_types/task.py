"""`type: task`: one replica of `nodes` jobs, each running the task's commands; or, with node groups, the
jobs of each group in turn, each with its group's commands, resources and ports (docs/runs.md#node-groups);
or, an array, one replica of one job per element, each knowing its index (docs/runs.md#arrays)."""

from __future__ import annotations

from core.configuration import TaskConfiguration
from core.run_types.base import RunConfigurator
from core.wire.agent_api import JobSpec


def array_environment(index: int, count: int) -> dict[str, str]:
    """An array element's index and the array's size, under Ferry's names, Slurm's (`sbatch --array`) and
    SkyPilot's (a pool's `--num-jobs`), so that scripts written for either run unchanged."""
    index_text, count_text, last = str(index), str(count), str(count - 1)
    return {
        "FERRY_ARRAY_INDEX": index_text,
        "FERRY_ARRAY_SIZE": count_text,
        "SLURM_ARRAY_TASK_ID": index_text,
        "SLURM_ARRAY_TASK_COUNT": count_text,
        "SLURM_ARRAY_TASK_MIN": "0",
        "SLURM_ARRAY_TASK_MAX": last,
        "SKYPILOT_JOB_RANK": index_text,
        "SKYPILOT_NUM_JOBS": count_text,
    }


class TaskConfigurator(RunConfigurator[TaskConfiguration]):
    def replica_count(self) -> int:
        """1, or an array's elements: each a replica of one job (core.runs.arrays)."""
        array = self.configuration.array
        return 1 if array is None else array.count

    def job_spec(self, *, run_name: str, replica_num: int, job_num: int, repo_id: str = "") -> JobSpec:
        spec = super().job_spec(run_name=run_name, replica_num=replica_num, job_num=job_num, repo_id=repo_id)
        array = self.configuration.array
        if array is None:
            return spec
        return spec.model_copy(update={"env": {**spec.env, **array_environment(replica_num, array.count)}})

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
