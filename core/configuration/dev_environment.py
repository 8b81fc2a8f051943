"""`type: dev-environment`: a machine to attach an IDE to, kept until stopped.

Ferry runs `init` and keeps the job up (core.run_types); `ferry attach` (and `ferry apply`) reach it over SSH,
forward its `ports` and print the link for its `ide`; its agent ends it after `inactivity_duration` with no
SSH connection (docs/attach.md). The IDE installs its own server over SSH, so `version` is not acted on.
dstack's deprecated `setup` runs right before `init`, as in dstack.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from core.configuration.base import RUN_FIELDS_NOT_ACTED_ON, BaseRunConfiguration, ConfigSummary
from core.configuration.durations import OptionalDuration
from core.configuration.fields import Commands, Port


class DevEnvironmentConfiguration(BaseRunConfiguration):
    NOT_ACTED_ON: ClassVar[frozenset[str]] = (RUN_FIELDS_NOT_ACTED_ON - {"setup"}) | {"version"}

    type: Literal["dev-environment"] = "dev-environment"
    ide: Literal["vscode", "cursor", "windsurf", "zed"] | None = None  # None: SSH only, as dstack allows
    version: str | None = None  # the IDE server's version
    init: Commands = Field(default_factory=list)  # run once before the environment is ready
    ports: list[Port] = Field(default_factory=list)
    inactivity_duration: OptionalDuration = None  # off: stays up until stopped

    @model_validator(mode="after")
    def _setup_before_init(self) -> DevEnvironmentConfiguration:
        # Moved into `init` (and emptied), so that validating the result again moves nothing twice.
        if self.setup:
            self.init = [*self.setup, *self.init]
            self.setup = []
        return self

    def summary(self) -> ConfigSummary:
        return self._summary("dev-environment", "nodes 1")
