"""Secrets in Ferry's Python API (docs/secrets.md): set, list, delete, and the check that every secret a run
names is set before it is submitted.

A secret is a SecretRecord in the store, its value sealed with Ferry's key (store/keys.py): the value is
sealed here, before the store sees it, and opened only by the step that sends a job to its agent
(activities/secrets.py). Nothing here needs Temporal.
"""

from __future__ import annotations

import time

from cli.errors import FerryError, NotFound
from core.configuration import BaseRunConfiguration
from core.repo_credentials import repo_key, ssh_key_secret, token_secret
from core.secrets import check_secret_name, check_secret_value, configuration_secrets
from store import SecretRecord, Store
from store.change_repository import OPERATOR
from store.keys import Keys, process_keys
from store.secret_repository import seal_secret


class SecretNotFound(NotFound):
    pass


def set_secret(
    store: Store, project: str, name: str, value: str, keys: Keys | None = None, *, by: str | None = None
) -> bool:
    """The secret stored, sealed, replacing the value of one of its name, as `by`'s change (None: the
    operator's, docs/teams.md#who-did-it); True if it is new."""
    try:
        check_secret_name(name)
        check_secret_value(value)
    except ValueError as err:
        raise FerryError(str(err)) from None
    sealed = seal_secret(keys or process_keys(), project, name, value, time.time(), by=by or OPERATOR)
    return store.put_secret(sealed)


def set_repo_credential(
    store: Store, project: str, url: str, value: str, *, ssh_key: bool, by: str | None = None
) -> str:
    """A private repo's token (or SSH private key) stored as the secret its URL names
    (docs/runs.md#private-repos), the other kind for the same repo deleted; the secret's name."""
    if not repo_key(url).split("://", 1)[-1].strip("/"):
        raise FerryError(f"{url!r} is not a repo's URL")
    name, other = (
        (ssh_key_secret(url), token_secret(url)) if ssh_key else (token_secret(url), ssh_key_secret(url))
    )
    set_secret(store, project, name, value, by=by)
    store.delete_secret(project, other, by=by)
    return name


def list_secrets(store: Store, project: str) -> list[SecretRecord]:
    return store.list_secrets(project)


def delete_secret(store: Store, project: str, name: str, *, by: str | None = None) -> None:
    if not store.delete_secret(project, name, by=by):
        raise SecretNotFound(f"no secret named {name} in project {project!r} (see ferry secret list)")


def check_secrets(store: Store, project: str, configurations: list[BaseRunConfiguration], what: str) -> None:
    """FerryError naming the secrets these configurations refer to that the project has not set."""
    wanted = sorted({name for c in configurations for name in configuration_secrets(c)})
    if not wanted:
        return
    missing = sorted(set(wanted) - {record.name for record in store.list_secrets(project, wanted)})
    if len(missing) == 1:
        raise FerryError(
            f"{what}: secret {missing[0]} is not set in project {project!r}: ferry secret set {missing[0]}"
        )
    if missing:
        raise FerryError(
            f"{what}: secrets {', '.join(missing)} are not set in project {project!r}: "
            "ferry secret set NAME for each"
        )
