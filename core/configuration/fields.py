"""Field types shared by the configurations: each accepts every spelling dstack documents and keeps one
normalised form (see the docstring of each type)."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
)

from core.configuration.interpolation import interpolate
from core.configuration.model import ConfigFieldError, ConfigModel, shape_of

# dstack's rule for run, fleet and volume names.
_NAME = re.compile(r"^[a-z][a-z0-9-]{1,40}$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            f"invalid name {value!r}: use 2 to 41 lowercase letters, digits and dashes, "
            "starting with a letter"
        )
    return value


Name = Annotated[str, AfterValidator(_check_name)]


def _reference(value: Any) -> Any:
    """dstack's `project/name` (or {project, name}) for what another project has: kept as `project/name`."""
    if isinstance(value, dict) and set(value) <= {"project", "name"} and "name" in value:
        project = value.get("project")
        return f"{project}/{value['name']}" if project else value["name"]
    return value


def _check_reference(value: str) -> str:
    project, sep, name = value.rpartition("/")
    if sep and (not project or "/" in project):
        raise ValueError(f"invalid reference {value!r}: expected NAME or PROJECT/NAME")
    _check_name(name)
    return value


# A fleet's name, or `project/name` for another project's (cli.fleet_api looks it up by this string).
Reference = Annotated[str, BeforeValidator(_reference), AfterValidator(_check_reference)]


class StopCriteria(StrEnum):
    """When a multi-node task is done: when every node is (`all-done`) or when the master is."""

    ALL_DONE = "all-done"
    MASTER_DONE = "master-done"


class StartupOrder(StrEnum):
    ANY = "any"
    MASTER_FIRST = "master-first"
    WORKERS_FIRST = "workers-first"


class SpotPolicy(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"
    AUTO = "auto"


class CreationPolicy(StrEnum):
    REUSE = "reuse"
    REUSE_OR_CREATE = "reuse-or-create"


# --- commands ----------------------------------------------------------------------------------------


def _command(value: Any) -> Any:
    # `- echo a: b` is a mapping in YAML: the commonest way to get a command wrong.
    if isinstance(value, dict):
        raise ValueError("a command with `: ` in it must be quoted, e.g. - 'echo \"a: b\"'")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


Commands = list[Annotated[str, BeforeValidator(_command)]]


# --- env ---------------------------------------------------------------------------------------------
# Normalised to dict[str, str | None]; None is dstack's bare `KEY`: the value is taken from the
# environment of whoever applies the configuration (see BaseRunConfiguration.resolved_env).


def _check_env_key(key: str) -> str:
    if not _ENV_KEY.match(key):
        raise ValueError(
            f"invalid variable name {key!r}: use letters, digits and _, not starting with a digit"
        )
    return key


def _env_scalar(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise ValueError(f"expected a string, a number or nothing, got {type(value).__name__}")


def _env_entry(value: Any) -> tuple[str, str | None]:
    if not isinstance(value, str):
        raise ValueError(f"expected KEY=VALUE or KEY, got {value!r}")
    key, sep, val = value.partition("=")
    return _check_env_key(key.strip()), (val if sep else None)


def _env_to_dict(value: list[tuple[str, str | None]] | dict[str, str | None]) -> dict[str, str | None]:
    if isinstance(value, dict):
        return value
    result: dict[str, str | None] = {}
    for index, (key, val) in enumerate(value):
        if key in result:
            raise ConfigFieldError([index], f"{key} is set twice")
        result[key] = val
    return result


_EnvList = list[Annotated[tuple[str, str | None], BeforeValidator(_env_entry)]]
_EnvMap = dict[
    Annotated[str, AfterValidator(_check_env_key)], Annotated[str | None, BeforeValidator(_env_scalar)]
]
if TYPE_CHECKING:
    Env = dict[str, str | None]
else:
    # A list or a map by the shape of the value, so each shape's errors point at its own items.
    Env = Annotated[
        Annotated[_EnvList, Tag("<list>")] | Annotated[_EnvMap, Tag("<map>")],
        Discriminator(
            shape_of,
            custom_error_type="env_shape",
            custom_error_message="expected a map of NAME: value or a list of NAME=value",
        ),
        AfterValidator(_env_to_dict),
    ]


# --- ports -------------------------------------------------------------------------------------------

_PORT_SPEC = re.compile(r"^\s*(?:(\d+)\s*:\s*)?(\d+)\s*$")


class PortMapping(ConfigModel):
    """A port the job listens on (`container_port`) and, optionally, the local port `attach` forwards
    it to (`local_port`; None: the same number)."""

    container_port: int = Field(ge=1, le=65535)
    local_port: int | None = Field(default=None, ge=1, le=65535)

    def __str__(self) -> str:
        return (
            str(self.container_port)
            if self.local_port is None
            else f"{self.local_port}:{self.container_port}"
        )


def _port_number(text: str) -> int:
    number = int(text)
    if not 1 <= number <= 65535:
        raise ValueError(f"port {number} is out of range 1..65535")
    return number


def _port(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"expected a port such as 8080 or 8000:8080, got {value!r}")
    if isinstance(value, int):
        return {"container_port": _port_number(str(value))}
    if isinstance(value, str):
        match = _PORT_SPEC.match(value)
        if not match:
            raise ValueError(f"expected a port such as 8080 or 8000:8080, got {value!r}")
        local, container = match.groups()
        return {
            "container_port": _port_number(container),
            "local_port": _port_number(local) if local is not None else None,
        }
    return value


Port = Annotated[PortMapping, BeforeValidator(_port)]


# --- volumes -----------------------------------------------------------------------------------------


def _check_mount_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"the mount path must be absolute, got {value!r}")
    return value


def _check_instance_path(value: str) -> str:
    if not value.startswith(("/", "~")):
        raise ValueError(f"the instance path must be absolute, got {value!r}")
    if value.startswith("~") and value != "~" and not value.startswith("~/"):
        # `~` is the home of the agent's user on the instance (docs/volumes.md); another user's is not known.
        raise ValueError(f"only `~` or `~/...` (the agent's user's home) can start the path, got {value!r}")
    if "\0" in value:
        raise ValueError("the instance path must not contain a NUL character")
    return value


def _check_volume_name(value: str) -> str:
    """A volume's name, where `${{ dstack.node_rank }}` stands for each node's rank (docs/volumes.md)."""
    if not _NAME.match(interpolate(value, 0)):
        _check_name(value)  # its message names the value as written
    return value


VolumeName = Annotated[str, AfterValidator(_check_volume_name)]

_VolumeNames = Annotated[
    Annotated[VolumeName, Tag("<string>")] | Annotated[list[VolumeName], Tag("<list>")],
    Discriminator(
        shape_of,
        custom_error_type="names_shape",
        custom_error_message="expected a volume name or a list of names",
    ),
]


class NetworkVolume(ConfigModel):
    """A named volume (`ferry volume`) mounted at `path`; of a list of names, the first that exists is used
    (docs/volumes.md)."""

    name: _VolumeNames
    path: Annotated[str, AfterValidator(_check_mount_path)]


class InstanceVolume(ConfigModel):
    """A directory of the host (`instance_path`) mounted at `path`."""

    instance_path: Annotated[str, AfterValidator(_check_instance_path)]
    path: Annotated[str, AfterValidator(_check_mount_path)]
    optional: bool = False


def _volume_from_string(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    source, sep, path = value.partition(":")
    if not sep or not source or not path:
        raise ValueError(f"expected name:/path or /instance/path:/path, got {value!r}")
    if source.startswith(("/", "~")):
        return {"instance_path": source, "path": path}
    return {"name": source, "path": path}


def _volume_kind(value: Any) -> str | None:
    if isinstance(value, InstanceVolume) or (isinstance(value, dict) and "instance_path" in value):
        return "<instance>"
    if isinstance(value, NetworkVolume | dict):
        return "<network>"
    return None


VolumeMount = Annotated[
    Annotated[NetworkVolume, Tag("<network>")] | Annotated[InstanceVolume, Tag("<instance>")],
    Discriminator(
        _volume_kind,
        custom_error_type="volume_shape",
        custom_error_message=(
            "expected name:/path, /instance/path:/path, {name, path} or {instance_path, path}"
        ),
    ),
    BeforeValidator(_volume_from_string),
]
