"""`type: task`: commands run to completion, on one node or several.

A task of node groups (`groups`: a head and its workers, each group with its own `nodes`, `commands`,
`resources` and `ports`) is validated as dstack validates it, `${{ groups[i].nodes[j].IP_ADDRESS }}` included,
but not run yet: core.configuration.runnable refuses it with the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from core.configuration.base import RUN_FIELDS_NOT_ACTED_ON, BaseRunConfiguration, ConfigSummary
from core.configuration.fields import Commands, Port
from core.configuration.interpolation import Context, commands_context, group_addresses
from core.configuration.model import ConfigFieldError, ConfigModel
from core.configuration.replica_groups import GroupName
from core.configuration.resources import ResourcesSpec

_COMMANDS = commands_context("nodes")


class NodeGroup(ConfigModel):
    """One group of a task's nodes: named by position ("0", "1"...) when not named."""

    name: GroupName | None = None
    nodes: int = Field(default=1, ge=1)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)  # not the task's, as in dstack
    commands: Commands = Field(default_factory=list)
    ports: list[Port] = Field(default_factory=list)


class TaskConfiguration(BaseRunConfiguration):
    # `ports`: `ferry attach` forwards them to localhost (docs/attach.md). `groups`: refused (runnable).
    NOT_ACTED_ON: ClassVar[frozenset[str]] = RUN_FIELDS_NOT_ACTED_ON

    type: Literal["task"] = "task"
    commands: Commands = Field(default_factory=list)
    nodes: int = Field(default=1, ge=1)  # one job per node, placed all at once
    ports: list[Port] = Field(default_factory=list)
    groups: list[NodeGroup] | None = None

    @model_validator(mode="before")
    @classmethod
    def _nodes_or_groups(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("groups") is not None and data.get("nodes") is not None:
            raise ConfigFieldError(["groups"], "cannot be used with `nodes`: each group gives its own")
        return data

    @model_validator(mode="after")
    def _check_commands(self) -> TaskConfiguration:
        if self.groups is None:
            self._needs_commands(self.commands)
            return self
        self._check_groups(self.groups)
        return self

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
        sizes = [group.nodes for group in groups]
        for index, group in enumerate(groups):
            for at, command in enumerate(group.commands):
                for number, _, node in group_addresses(command):
                    if number >= len(sizes) or node >= sizes[number]:
                        raise ConfigFieldError(
                            ["groups", index, "commands", at],
                            f"${{{{ groups[{number}].nodes[{node}].IP_ADDRESS }}}} names no node: "
                            f"the groups have {', '.join(map(str, sizes))} nodes",
                        )

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
            return self._summary("task", f"node groups {shown}")
        return self._summary("task", f"nodes {self.nodes}")
