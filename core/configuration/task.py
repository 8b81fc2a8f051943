"""`type: task`: commands run to completion, on one node or several."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from core.configuration.base import RUN_FIELDS_NOT_ACTED_ON, BaseRunConfiguration, ConfigSummary
from core.configuration.fields import Commands, Port


class TaskConfiguration(BaseRunConfiguration):
    # `ports`: `ferry attach` forwards them to localhost (docs/attach.md).
    NOT_ACTED_ON: ClassVar[frozenset[str]] = RUN_FIELDS_NOT_ACTED_ON

    type: Literal["task"] = "task"
    commands: Commands = Field(default_factory=list)
    nodes: int = Field(default=1, ge=1)  # one job per node, placed all at once
    ports: list[Port] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_commands(self) -> TaskConfiguration:
        self._needs_commands(self.commands)
        return self

    def summary(self) -> ConfigSummary:
        return self._summary("task", f"nodes {self.nodes}")
