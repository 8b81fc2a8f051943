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
    SlurmBackendConfiguration,
    TaskConfiguration,
    VolumeConfiguration,
)
from core.configuration.code_sources import FILES_IN_ARCHIVE, code_path, destination
from core.configuration.fields import NetworkVolume
from core.configuration.interpolation import group_addresses, is_per_node, secrets_in


class Refusal(NamedTuple):
    """Why Ferry cannot run a configuration: `path` is the field it is about (as in the loader's errors)."""

    path: tuple[str, ...]
    reason: str


def refusals(configuration: AnyConfiguration) -> list[Refusal]:
    """Every reason Ferry cannot run `configuration`; [] when it can."""
    if isinstance(configuration, VolumeConfiguration):
        return _volume_refusals(configuration)
    if isinstance(configuration, SlurmBackendConfiguration):
        return []
    if isinstance(configuration, FleetConfiguration):
        found = []
    else:
        # A task's node addresses are filled in once its replica is placed; a service's are not yet.
        found = (
            _working_dir_refusals(configuration)
            + _docker_refusals(configuration)
            + _files_refusals(configuration)
            + _shared_volume_refusals(configuration)
            + _reference_refusals(configuration, addresses=isinstance(configuration, ServiceConfiguration))
        )
    if isinstance(configuration, ServiceConfiguration):
        return (
            found
            + _model_format_refusals(configuration)
            + [
                refusal
                for group, at in zip(configuration.groups, _group_paths(configuration), strict=True)
                for refusal in _commands_refusals(
                    configuration,
                    group.commands,
                    at,
                    group.image if group.has_own_container else configuration.image,
                )
            ]
        )
    if isinstance(configuration, TaskConfiguration) and configuration.groups is not None:
        return found + [
            refusal
            for index, group in enumerate(configuration.groups)
            for refusal in _commands_refusals(
                configuration, group.commands, ("groups", str(index), "commands"), configuration.image
            )
        ]
    if isinstance(configuration, TaskConfiguration):
        return found + _commands_refusals(
            configuration, configuration.commands, ("commands",), configuration.image
        )
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


# dstack's `docker: true` gives the job a Docker daemon of its own. Ferry runs containers with the
# instance's engine for the jobs it places, and hands no engine to a job
# (docs/containers.md#docker-in-the-job).
DOCKER_REFUSED = (
    "Ferry does not give a job a container engine; run your image with `image:` (docs/containers.md)"
)


def _docker_refusals(configuration: RunConfiguration) -> list[Refusal]:
    found = [Refusal(("docker",), DOCKER_REFUSED)] if configuration.docker else []
    if isinstance(configuration, ServiceConfiguration) and isinstance(configuration.replicas, list):
        found += [
            Refusal(("replicas", str(index), "docker"), DOCKER_REFUSED)
            for index, group in enumerate(configuration.replicas)
            if group.docker
        ]
    return found


def _files_refusals(configuration: RunConfiguration) -> list[Refusal]:
    """What no rule of docs/runs.md#files can place, of `files` and of `repos` (placed alike): the root
    directory, or Ferry's own place in the archive. A missing or too large source is said at apply time,
    where the user's machine is read (activities.code.code_sources)."""
    found = []
    mappings = [("files", i, m) for i, m in enumerate(configuration.files)]
    mappings += [("repos", i, repo.as_file()) for i, repo in enumerate(configuration.repos)]
    for field, index, mapping in mappings:
        at = (field, str(index))
        in_code = code_path(mapping, configuration.working_dir)
        if destination(mapping, configuration.working_dir) == "/":
            found.append(Refusal(at, f"{mapping.path} is the root directory: name a path under it"))
        elif in_code is not None and in_code.split("/")[0] == FILES_IN_ARCHIVE:
            found.append(
                Refusal(at, f"{mapping.path}: {FILES_IN_ARCHIVE} is Ferry's own (docs/runs.md#files)")
            )
    return found


def _volume_refusals(configuration: VolumeConfiguration) -> list[Refusal]:
    return [
        Refusal(
            (field,),
            f"Ferry cannot register {what}: its volumes are directories on an instance of a fleet "
            "(docs/volumes.md)",
        )
        for field, what in (("volume_id", "a cloud disk"), ("claim_name", "a Kubernetes volume claim"))
        if getattr(configuration, field) is not None
    ]


def _reference_refusals(configuration: RunConfiguration, *, addresses: bool) -> list[Refusal]:
    """`${{ secrets.NAME }}` in commands: dstack fills secrets in `env` and `registry_auth` only, and a
    command would write the value into the job's script on disk (docs/secrets.md). With `addresses`,
    `${{ groups[i].<nodes|replicas>[j].IP_ADDRESS }}` too: no job knows another's address yet."""
    found = []
    for path, template, _ in configuration.templates():
        in_commands = "commands" in path
        reasons = [
            f"${{{{ {name} }}}} is filled in `env` and `registry_auth` only, as in dstack: set "
            f"`env: [NAME=${{{{ {name} }}}}]` and use $NAME in the command"
            for name in (secrets_in(template) if in_commands else [])
        ]
        if addresses:
            reasons += [
                f"${{{{ groups[{group}].{member}[{index}].IP_ADDRESS }}}} is not filled in yet: "
                "a job does not know the other groups' addresses"
                for group, member, index in group_addresses(template)[:1]
            ]
        found += [Refusal(tuple(str(part) for part in path), reason) for reason in reasons]
    return found


def _shared_volume_refusals(configuration: RunConfiguration) -> list[Refusal]:
    """A named volume is attached to one job at a time: the nodes of a multi-node task each need their own
    (`${{ dstack.node_rank }}` in its name), or all but one would fail."""
    if not isinstance(configuration, TaskConfiguration) or configuration.nodes_num() == 1:
        return []
    found = []
    for index, volume in enumerate(configuration.volumes):
        names = [] if not isinstance(volume, NetworkVolume) else volume.name
        names = [names] if isinstance(names, str) else names
        shared = [name for name in names if not is_per_node(name)]
        if shared:
            found.append(
                Refusal(
                    ("volumes", str(index), "name"),
                    f"the {configuration.nodes_num()} nodes cannot share volume {shared[0]}: a volume is "
                    "attached to one job at a time; name one per node, "
                    f"e.g. {shared[0]}-${{{{ dstack.node_rank }}}}",
                )
            )
    return found


def _model_format_refusals(configuration: ServiceConfiguration) -> list[Refusal]:
    """The proxy serves a model's chat completions as OpenAI's API only (gateway/models_api.py): dstack's
    `format: tgi` asks its gateway to translate to TGI's own API, which Ferry's does not."""
    model = configuration.model
    if isinstance(model, str) or model is None or model.format != "tgi":
        return []
    return [
        Refusal(
            ("model", "format"),
            "tgi: Ferry's proxy serves models OpenAI-style only; serve an OpenAI-compatible API "
            "(TGI has one at /v1) and set format: openai",
        )
    ]


def _group_paths(configuration: ServiceConfiguration) -> list[tuple[str, ...]]:
    if not isinstance(configuration.replicas, list):
        return [("commands",)]
    return [("replicas", str(index), "commands") for index in range(len(configuration.replicas))]


def _commands_refusals(
    configuration: TaskConfiguration | ServiceConfiguration,
    commands: list[str],
    at: tuple[str, ...],
    image: str | None,
) -> list[Refusal]:
    """`image`: the jobs' (a replica group's own, else the configuration's)."""
    if any(command.strip() for command in commands):
        return []
    kind = configuration.type
    if image is not None and not commands:
        return []  # the image's entrypoint runs, as in dstack (docs/containers.md)
    if commands:
        reason = "nothing to run: every command is blank"
    else:
        reason = f"nothing to run: a {kind} needs `commands`"
    return [Refusal(at, reason)]
