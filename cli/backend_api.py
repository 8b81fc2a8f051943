"""Backends in Ferry's Python API (docs/backends.md): list, apply and delete a project's backends.

Applying one checks it once against its login node (Slurm answers, and knows every partition the
configuration lists: a wrong one is refused with Slurm's own list), then records it with its login key
sealed (store.backend_repository). The API does this for a user's `ferry apply -f slurm.yml`, whose CLI
reads the key and sends it (docs/teams.md#backends); nothing here needs Temporal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cli.errors import FerryError, NotFound
from core.configuration import SlurmBackendConfiguration

if TYPE_CHECKING:
    from activities.slurm_backend import SlurmBackend
    from store import BackendRecord, Store
    from store.keys import Keys


def backend_where(record: BackendRecord) -> str:
    """Its login node and partitions, as `ferry backend list` shows them."""
    return SlurmBackendConfiguration.model_validate(record.configuration_data()).summary().scale


def record_backend(
    store: Store, project: str, configuration: SlurmBackendConfiguration, key: str, keys: Keys | None = None
) -> None:
    """The backend in the store, its login key sealed (store.backend_repository) with `keys` (this
    process's by default)."""
    from store.backend_repository import seal_backend
    from store.keys import process_keys

    record = seal_backend(
        keys or process_keys(), project, configuration.backend_name, configuration.type,
        configuration.model_dump_json(), key,
    )  # fmt: skip
    store.put_backend(record)


def delete_backend(store: Store, project: str, name: str) -> None:
    if not store.delete_backend(project, name):
        raise NotFound(f"project {project} has no backend {name}")


def login_only(configuration: SlurmBackendConfiguration, key: str) -> SlurmBackend:
    """The backend reached at its login node only (no agent is sent), host keys checked as the worker's
    are (FERRY_SSH_KNOWN_HOSTS)."""
    from activities.slurm_backend import SlurmBackend
    from activities.ssh_config import DeployOptions
    from core.settings import Settings

    async def no_bundle(_: object) -> object:
        raise AssertionError("a backend's check sends no agent")

    options = DeployOptions(known_hosts=Settings.from_env().ssh_known_hosts)
    return SlurmBackend(configuration.backend_name, configuration, key, options, no_bundle)  # type: ignore[arg-type]


def one_line(name: str, err: Exception) -> FerryError:
    """A backend's error as Ferry says it: once prefixed with the backend's name."""
    said = str(err)
    return FerryError(said if said.startswith(f"backend {name}:") else f"backend {name}: {said}")


async def checked_partitions(configuration: SlurmBackendConfiguration, key: str) -> list[str]:
    """The partitions Slurm has that the backend lists; FerryError naming what is wrong."""
    from activities.slurm_backend import SlurmBackendError

    backend = login_only(configuration, key)
    try:
        said = await backend.slurm("sinfo", "-h", "-o", "%R")
    except SlurmBackendError as err:
        raise one_line(configuration.backend_name, err) from None
    finally:
        await backend.aclose()
    known = sorted(set(said.split()))
    missing = [p.name for p in configuration.partitions if p.name not in known]
    if missing:
        raise FerryError(
            f"backend {configuration.backend_name}: Slurm has no partition {', '.join(missing)} "
            f"(it has {', '.join(known) or 'none'})"
        )
    return [p.name for p in configuration.partitions]
