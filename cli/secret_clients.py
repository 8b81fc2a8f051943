"""A project's secrets as `ferry secret` reaches them (docs/teams.md#secrets): through Ferry's API as the
logged-in user (`RemoteSecrets`), where the API seals each value and records who set it; or over the store
itself with Ferry's key (`StoreSecrets`): the API's routes, as their caller, and an operator's CLI with
Temporal's address and no login, as the operator."""

from __future__ import annotations

from typing import Protocol
from urllib.parse import quote

from api.messages import SecretInfo, SecretSet
from cli.remote_runs import ApiSession
from store import Store


class ProjectSecrets(Protocol):
    project: str

    def set(self, name: str, value: str) -> bool: ...  # whether it is new
    def set_repo(self, url: str, value: str, *, ssh_key: bool) -> str: ...  # the secret's name
    def listed(self) -> list[SecretInfo]: ...
    def delete(self, name: str) -> None: ...


class RemoteSecrets:
    """Through the API (api/secret_routes.py)."""

    def __init__(self, session: ApiSession, project: str) -> None:
        self.session = session
        self.project = project
        self._base = f"/api/projects/{quote(project, safe='')}"

    def set(self, name: str, value: str) -> bool:
        path = f"{self._base}/secrets/{quote(name, safe='')}"
        answer = self.session.request("PUT", path, json={"value": value})
        return SecretSet.model_validate(answer.json()).created

    def set_repo(self, url: str, value: str, *, ssh_key: bool) -> str:
        body = {"url": url, "value": value, "ssh_key": ssh_key}
        answer = self.session.request("POST", f"{self._base}/repo-credentials", json=body)
        return SecretSet.model_validate(answer.json()).name

    def listed(self) -> list[SecretInfo]:
        answer = self.session.request("GET", f"{self._base}/secrets")
        return [SecretInfo.model_validate(item) for item in answer.json()]

    def delete(self, name: str) -> None:
        self.session.request("DELETE", f"{self._base}/secrets/{quote(name, safe='')}")


class StoreSecrets:
    """The store itself, each change recorded as `by`'s (None: the operator's, store.secret_repository)."""

    def __init__(self, store: Store, project: str, by: str | None = None) -> None:
        self.store = store
        self.project = project
        self.by = by

    def set(self, name: str, value: str) -> bool:
        from cli.secret_api import set_secret

        return set_secret(self.store, self.project, name, value, by=self.by)

    def set_repo(self, url: str, value: str, *, ssh_key: bool) -> str:
        from cli.secret_api import set_repo_credential

        return set_repo_credential(self.store, self.project, url, value, ssh_key=ssh_key, by=self.by)

    def listed(self) -> list[SecretInfo]:
        return [
            SecretInfo(
                name=s.name,
                key=s.key_id,
                created_at=s.created_at,
                updated_at=s.updated_at,
                updated_by=s.updated_by,
            )
            for s in self.store.list_secrets(self.project)
        ]

    def delete(self, name: str) -> None:
        from cli.secret_api import delete_secret

        delete_secret(self.store, self.project, name, by=self.by)
