"""A task's secrets as the agent keeps them: in memory only, never under its data dir (docs/secrets.md).

A job's JobSpec.secrets, its repos' credentials (docs/runs.md#private-repos) and a container's registry
credentials arrive filled in (activities/secrets.py);
agent.records writes the job spec with each secret's name and an empty value, and the record with empty
credentials (HELD_CREDENTIALS), and keeps the values here, by task directory. A restarted agent has none:
a job that runs already has its environment (its process, or its container, got it at its start), but one
that has not started cannot get it any more, and ends (`lost`). The values are masked in what the agent
logs and in a task's termination message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from core.masking import LOG_MASKING, mask
from core.wire.agent_api import ContainerSpec, JobSpec, RegistryCredentials, TaskSubmitRequest
from core.wire.repo_clone import RepoClone

# What the record on disk says in place of a container's credentials: there were some, held in memory.
HELD_CREDENTIALS = RegistryCredentials(username="", password="")
LOST = (
    "the agent restarted before the job started, and its secrets went with it: an agent holds them in "
    "memory only (docs/secrets.md)"
)


@dataclass
class _Held:
    secrets: dict[str, str] = field(default_factory=dict)
    registry_auth: RegistryCredentials | None = None
    repos: dict[int, RepoClone] = field(default_factory=dict)  # by index: a clone's credentials

    def values(self) -> list[str]:
        credentials = [] if self.registry_auth is None else [self.registry_auth.password]
        return [*self.secrets.values(), *credentials, *_repo_values(self.repos.values())]


def _repo_values(repos: Iterable[RepoClone]) -> list[str]:
    """A clone's token, and each line of its key: masked wherever they would be printed."""
    return [line for repo in repos for value in repo.credentials() for line in [value, *value.splitlines()]]


def _without_values(repo: RepoClone) -> RepoClone:
    """A clone as it is written: "" for each credential it has (held in memory), None for none."""
    blank = {name: "" for name in ("token", "ssh_key") if getattr(repo, name)}
    return repo.model_copy(update=blank) if blank else repo


_held: dict[Path, _Held] = {}


def _hold(root: Path) -> _Held:
    held = _held.get(root)
    if held is None:
        held = _held[root] = _Held()
    return held


def written_container(root: Path, container: ContainerSpec | None) -> ContainerSpec | None:
    """A container as its record is written: its credentials held here, HELD_CREDENTIALS in their place."""
    if container is None or container.registry_auth is None or container.registry_auth == HELD_CREDENTIALS:
        return container
    _hold(root).registry_auth = container.registry_auth
    LOG_MASKING.add([container.registry_auth.password])
    return container.model_copy(update={"registry_auth": HELD_CREDENTIALS})


def written_spec(root: Path, spec: JobSpec) -> JobSpec:
    """A job spec as it is written: its secrets held here, their names alone on disk."""
    held = _hold(root)
    held.secrets = dict(spec.secrets)
    if any(repo.credentials() for repo in spec.repos):
        held.repos = {repo.index: repo for repo in spec.repos if repo.credentials()}
    LOG_MASKING.add([*spec.secrets.values(), *_repo_values(spec.repos)])
    repos = [_without_values(repo) for repo in spec.repos]
    return spec.model_copy(update={"secrets": dict.fromkeys(spec.secrets, ""), "repos": repos})


def read_spec(root: Path, spec: JobSpec) -> JobSpec:
    """A job spec as it is read back: its secrets' values, when this agent holds them (else none)."""
    held = _held.get(root)
    secrets = {name: held.secrets[name] for name in spec.secrets if name in held.secrets} if held else {}
    repos = [_read_repo(held, repo) for repo in spec.repos]
    return spec.model_copy(update={"secrets": secrets, "repos": repos})


def _read_repo(held: _Held | None, repo: RepoClone) -> RepoClone:
    kept = held.repos.get(repo.index) if held is not None else None
    return repo if kept is None else repo.model_copy(update={"token": kept.token, "ssh_key": kept.ssh_key})


def lost(root: Path, container: ContainerSpec | None, spec_file: Path) -> bool:
    """Whether secrets a task's job needs to start went with an earlier agent: its container's
    credentials, or its job spec's secrets (`spec_file` as written)."""
    held = _held.get(root) or _Held()
    if container is not None and container.registry_auth == HELD_CREDENTIALS and held.registry_auth is None:
        return True
    try:
        written = JobSpec.model_validate_json(spec_file.read_bytes())
    except FileNotFoundError:
        return False
    held_repo = any(
        "" in (repo.token, repo.ssh_key) and repo.index not in held.repos for repo in written.repos
    )
    return held_repo or any(name not in held.secrets for name in written.secrets)


def same_request(a: TaskSubmitRequest, b: TaskSubmitRequest) -> bool:
    """Whether two submissions are the same but for credentials (a record read back has none)."""
    return _without_credentials(a) == _without_credentials(b)


def _without_credentials(request: TaskSubmitRequest) -> TaskSubmitRequest:
    if request.container is None:
        return request
    container = request.container.model_copy(update={"registry_auth": None})
    return request.model_copy(update={"container": container})


def masked(root: Path, message: str | None) -> str | None:
    held = _held.get(root)
    return message if message is None or held is None else mask(message, held.values())


def forget(root: Path) -> None:
    _held.pop(root, None)
