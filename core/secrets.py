"""Secrets (docs/secrets.md): the names a configuration refers to as `${{ secrets.NAME }}`, a job's filled in
at the last moment, and the values masked in what Ferry itself prints or logs.

A configuration keeps its references all the way through the workflows; only the step that sends a job to
its agent (activities/secrets.py) fills them in: `env` values into JobSpec.secrets, `registry_auth` into
the task's ContainerSpec. The masking is core.masking's (the agent masks too, and imports no
configuration).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from core.configuration import BaseRunConfiguration
from core.configuration.interpolation import secrets_in, substitute
from core.wire.agent_api import JobSpec, RegistryCredentials

# dstack's limits (a name also has to be one a reference can write: `${{ secrets.NAME }}`).
SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")
MAX_SECRET_BYTES = 5000
_PREFIX = "secrets."


def check_secret_name(name: str) -> str:
    if not SECRET_NAME.match(name):
        raise ValueError(
            f"{name!r} is not a secret name: letters, digits and _, not starting with a digit, at most 200"
        )
    return name


def check_secret_value(value: str) -> str:
    if "\0" in value:
        raise ValueError("a secret cannot hold a NUL character: no environment variable can")
    if len(value.encode()) > MAX_SECRET_BYTES:
        raise ValueError(f"a secret holds at most {MAX_SECRET_BYTES} bytes")
    return value


def names_in(templates: Iterable[str]) -> list[str]:
    """The secrets these texts refer to, each once, sorted."""
    return sorted({name.removeprefix(_PREFIX) for text in templates for name in secrets_in(text)})


def configuration_secrets(configuration: BaseRunConfiguration) -> list[str]:
    """The secrets a configuration refers to (its `env` and `registry_auth`: validation takes them nowhere
    else, core.configuration.runnable refuses them in commands)."""
    return names_in(template for _, template, _ in configuration.templates())


def spec_secrets(spec: JobSpec) -> list[str]:
    return names_in(spec.env.values())


def credentials_secrets(credentials: RegistryCredentials | None) -> list[str]:
    return [] if credentials is None else names_in([credentials.username, credentials.password])


def _fill(template: str, values: Mapping[str, str]) -> str:
    return substitute(template, {_PREFIX + name: value for name, value in values.items()})


def fill_spec(spec: JobSpec, values: Mapping[str, str]) -> JobSpec:
    """The spec with each `env` value that refers to a secret moved into `secrets`, filled in from `values`
    (which holds every secret it names): the agent keeps `secrets` in memory only."""
    env, secrets = {}, dict(spec.secrets)
    for key, template in spec.env.items():
        if secrets_in(template):
            secrets[key] = _fill(template, values)
        else:
            env[key] = template
    return spec.model_copy(update={"env": env, "secrets": secrets})


def fill_credentials(credentials: RegistryCredentials, values: Mapping[str, str]) -> RegistryCredentials:
    return RegistryCredentials(
        username=_fill(credentials.username, values), password=_fill(credentials.password, values)
    )
