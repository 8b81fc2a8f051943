"""What Ferry cannot run of a valid configuration, decided before anything is submitted.

A configuration can be valid (dstack accepts it, so does core.configuration) and still ask for what Ferry
does not do yet. A field Ferry merely ignores gets a warning (ConfigModel.unsupported_fields); a
configuration that would leave nothing to run, or that Ferry has no way to start, is refused here, so that
`ferry validate`, `ferry apply` and FerryAPI.submit say why at once instead of submitting a run that can
never start (a job needs at least one command: core.wire.agent_api.JobSpec).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import NamedTuple

from core.configuration import (
    AnyConfiguration,
    FleetConfiguration,
    RunConfiguration,
    ServiceConfiguration,
    TaskConfiguration,
)


class Refusal(NamedTuple):
    """Why Ferry cannot run a configuration: `path` is the field it is about (as in the loader's errors)."""

    path: tuple[str, ...]
    reason: str


def refusals(configuration: AnyConfiguration) -> list[Refusal]:
    """Every reason Ferry cannot run `configuration`; [] when it can."""
    found = [] if isinstance(configuration, FleetConfiguration) else _working_dir_refusals(configuration)
    if isinstance(configuration, ServiceConfiguration):
        return found + [
            refusal
            for group, at in zip(configuration.groups, _group_paths(configuration), strict=True)
            for refusal in _commands_refusals(configuration, group.commands, at)
        ]
    if isinstance(configuration, TaskConfiguration):
        return found + _commands_refusals(configuration, configuration.commands, ("commands",))
    if isinstance(configuration, FleetConfiguration) and configuration.ssh_config is None:
        return [
            Refusal(
                ("nodes",),
                "Ferry cannot create instances yet (it has no cloud backend): "
                "a fleet needs `ssh_config` with the hosts to use",
            )
        ]
    # A dev environment always runs: its `init`, then a command that keeps it up (core.run_types).
    return found


def _working_dir_refusals(configuration: RunConfiguration) -> list[Refusal]:
    """The agent confines a relative working_dir to the job's directory (core.wire.agent_api.JobSpec)."""
    working_dir = configuration.working_dir
    if working_dir is None or PurePosixPath(working_dir).is_absolute():
        return []
    if ".." in PurePosixPath(working_dir).parts or "\0" in working_dir:
        return [
            Refusal(("working_dir",), "a relative working_dir cannot go up (`..`) out of the job's directory")
        ]
    return []


def _group_paths(configuration: ServiceConfiguration) -> list[tuple[str, ...]]:
    if not isinstance(configuration.replicas, list):
        return [("commands",)]
    return [("replicas", str(index), "commands") for index in range(len(configuration.replicas))]


def _commands_refusals(
    configuration: TaskConfiguration | ServiceConfiguration, commands: list[str], at: tuple[str, ...]
) -> list[Refusal]:
    if any(command.strip() for command in commands):
        return []
    kind = configuration.type
    if configuration.image is not None:
        # dstack runs the image's entrypoint when there are no commands; Ferry runs no image yet.
        reason = (
            f"nothing to run: Ferry does not run `image` yet (it runs `commands` on the host), "
            f"so a {kind} needs `commands`"
        )
    elif commands:
        reason = "nothing to run: every command is blank"
    else:
        reason = f"nothing to run: a {kind} needs `commands`"
    return [Refusal(at, reason)]
