"""`type: task`: commands run to completion, on one node or several.

A task of node groups (`groups`: a head and its workers, each group with its own `nodes`, `commands`,
`resources` and `ports`) is validated as dstack validates it, `${{ groups[i].nodes[j].IP_ADDRESS }}` included
(a task without `groups` is its one group, `groups[0]`), and runs as one replica whose jobs are the groups'
nodes in order, placed as one gang (core.run_types.task, docs/runs.md#node-groups).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from core.configuration.base import RUN_FIELDS_NOT_ACTED_ON, BaseRunConfiguration, ConfigSummary
from core.configuration.fields import Commands, Port
from core.configuration.interpolation import Context, commands_context, group_addresses
from core.configuration.model import ConfigFieldError, ConfigModel
from core.configuration.replica_groups import GroupName
from core.configuration.resources import ResourcesSpec

_COMMANDS = commands_context("nodes")
# The most elements an array may have: its run keeps each element's latest job in its state, as Slurm's
# default MaxArraySize (1001: indices 0..1000) bounds its arrays.
MAX_ARRAY_ELEMENTS = 1000


class ArraySpec(ConfigModel):
    """A task run `count` times, as elements 0..count-1 of one run, each a job of its own that knows its
    index (FERRY_ARRAY_INDEX), with at most `max_parallel` at once (docs/runs.md#arrays)."""

    count: int = Field(ge=1, le=MAX_ARRAY_ELEMENTS)
    max_parallel: int | None = Field(default=None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _count_alone(cls, data: Any) -> Any:
        """`array: 100` is `array: {count: 100}`."""
        return {"count": data} if isinstance(data, int) and not isinstance(data, bool) else data

    def parallel(self) -> int:
        """How many elements run at once, at most."""
        return min(self.count, self.max_parallel or self.count)


class NodeGroup(ConfigModel):
    """One group of a task's nodes: named by position ("0", "1"...) when not named."""

    name: GroupName | None = None
    nodes: int = Field(default=1, ge=1)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)  # not the task's, as in dstack
    commands: Commands = Field(default_factory=list)
    ports: list[Port] = Field(default_factory=list)


class TaskConfiguration(BaseRunConfiguration):
    # `ports`: `ferry attach` forwards them to localhost (docs/attach.md); a node group's, those of its nodes.
    # A node group's `resources` are matched as the task's are (core.fleets.matching).
    NOT_ACTED_ON: ClassVar[frozenset[str]] = RUN_FIELDS_NOT_ACTED_ON | {
        "groups.resources.gpu.compute_capability"
    }

    type: Literal["task"] = "task"
    commands: Commands = Field(default_factory=list)
    nodes: int = Field(default=1, ge=1)  # one job per node, placed all at once
    ports: list[Port] = Field(default_factory=list)
    groups: list[NodeGroup] | None = None
    array: ArraySpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _nodes_or_groups(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("groups") is not None and data.get("nodes") is not None:
            raise ConfigFieldError(["groups"], "cannot be used with `nodes`: each group gives its own")
        return data

    @model_serializer(mode="wrap")
    def _without_nodes_beside_groups(self, handler: SerializerFunctionWrapHandler) -> Any:
        # `nodes` and `groups` exclude each other: a dump (a workflow's input, the store's copy) that
        # loads again leaves out the default `nodes` when `groups` gives the nodes.
        data = handler(self)
        if isinstance(data, dict) and self.groups is not None:
            data.pop("nodes", None)
        return data

    @model_validator(mode="after")
    def _check_commands(self) -> TaskConfiguration:
        if self.array is not None:
            self._check_array()
        if self.groups is None:
            self._needs_commands(self.commands)
            # Without `groups`, the task's nodes are its one group, `groups[0]`, as in dstack.
            self._check_addresses([self.nodes], [(["commands"], self.commands)])
            return self
        self._check_groups(self.groups)
        return self

    def _check_array(self) -> None:
        # An element is one job: a replica of the run (core.runs.arrays), never a gang of nodes.
        one_node = "an array's elements are one node each"
        if self.groups is not None:
            raise ConfigFieldError(["array"], f"cannot be used with `groups`: {one_node}")
        if self.nodes > 1:
            raise ConfigFieldError(["array"], f"cannot be used with `nodes`: {one_node}")
        if self.stop_criteria != "all-done":
            raise ConfigFieldError(["stop_criteria"], "an array has no master: every element must end")
        if self.schedule is not None:
            # A cycle starts the first `max_parallel` elements again; the rest would count as done from
            # the cycle before (core.runs.arrays counts elements, not cycles).
            raise ConfigFieldError(["array"], "cannot be used with `schedule` yet (docs/runs.md#arrays)")

    def _check_groups(self, groups: list[NodeGroup]) -> None:
        if not groups:
            raise ConfigFieldError(["groups"], "an empty list: give at least one group")
        for field in ("commands", "ports", "entrypoint"):
            if getattr(self, field):
                raise ConfigFieldError([field], "set it in each node group when `groups` is given")
        for index, group in enumerate(groups):
            group.name = str(index) if group.name is None else group.name
            if not group.commands and self.image is None:
                raise ConfigFieldError(
                    ["groups", index, "commands"], "required: each group lists its commands"
                )
        for name, count in Counter(group.name for group in groups).items():
            if count > 1:
                raise ConfigFieldError(["groups"], f"two groups are named {name!r}")
        self._check_addresses(
            [group.nodes for group in groups],
            [(["groups", index, "commands"], group.commands) for index, group in enumerate(groups)],
        )

    @staticmethod
    def _check_addresses(sizes: list[int], command_lists: list[tuple[list[str | int], list[str]]]) -> None:
        """Each `${{ groups[i].nodes[j].IP_ADDRESS }}` names a node of the task (`sizes`: each group's)."""
        for path, commands in command_lists:
            for at, command in enumerate(commands):
                for number, _, node in group_addresses(command):
                    if number >= len(sizes) or node >= sizes[number]:
                        have = ", ".join(map(str, sizes))
                        raise ConfigFieldError(
                            [*path, at],
                            f"${{{{ groups[{number}].nodes[{node}].IP_ADDRESS }}}} names no node: "
                            f"the task's groups have {have} node{'s' if sizes != [1] else ''}",
                        )

    def nodes_num(self) -> int:
        """The task's nodes: `nodes`, or every node group's."""
        return self.nodes if self.groups is None else sum(group.nodes for group in self.groups)

    def templates(self) -> Iterator[tuple[list[str | int], str, Context]]:
        yield from super().templates()
        for at, command in enumerate(self.commands):
            yield ["commands", at], command, _COMMANDS
        for index, group in enumerate(self.groups or []):
            for at, command in enumerate(group.commands):
                yield ["groups", index, "commands", at], command, _COMMANDS

    def _command_lists(self) -> list[list[str]]:
        return [self.commands, *(group.commands for group in self.groups or [])]

    def summary(self) -> ConfigSummary:
        if self.groups is not None:
            shown = ", ".join(f"{group.name} {group.nodes}" for group in self.groups)
            summary = self._summary("task", f"node groups {shown}")
            # Each node gets its group's resources, not the task's (as in dstack).
            resources = "; ".join(f"{group.name}: {group.resources.pretty()}" for group in self.groups)
            return summary._replace(resources=resources)
        if self.array is not None:
            at_once = f", {self.array.max_parallel} at once" if self.array.max_parallel else ""
            return self._summary("task", f"array {self.array.count}{at_once}")
        return self._summary("task", f"nodes {self.nodes}")
