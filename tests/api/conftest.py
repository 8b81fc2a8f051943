"""The API as a real process (`python -m api`) over a fresh SQLite store, with a global admin, two
projects and a user in each (docs/teams.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from core.services.replicas import token_hash
from core.teams.roles import GlobalRole, ProjectRole
from embedded.processes import free_port
from store.engine import make_engine, migrate
from store.keys import process_keys
from store.models import VolumeRecord
from store.repository import Store
from store.secret_repository import seal_secret

TOKENS = {"root": "root-token", "alice": "alice-token", "bob": "bob-token", "carol": "carol-token"}


@dataclass
class Api:
    url: str
    store: Store

    def client(self, user: str | None = None, token: str | None = None) -> httpx.Client:
        token = token if token is not None else (TOKENS[user] if user else None)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, trust_env=False)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Api]:
    """One API process per module, over its own SQLite store; with the module's API_ENV in its environment,
    if it has one."""
    url = f"sqlite:///{tmp_path_factory.mktemp('api') / 'ferry.db'}"
    engine = make_engine(url)
    migrate(engine)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "api", "--database-url", url, "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **getattr(request.module, "API_ENV", {})},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                httpx.get(f"{base}/openapi.json", timeout=1, trust_env=False)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
                assert time.monotonic() < deadline, "the API did not start in 60 s"
                time.sleep(0.05)
        yield Api(base, Store(engine))
    finally:
        process.terminate()
        process.wait(timeout=30)
        engine.dispose()


@pytest.fixture
def api(served: Api, reset: Callable[[], None]) -> Api:
    """The module's API, its teams as they start (`reset`)."""
    reset()
    return served


@pytest.fixture
def reset(served: Api) -> Callable[[], None]:
    return lambda: _teams_as_they_start(served.store)


def _teams_as_they_start(store: Store) -> None:
    """Root, a global admin; alice, manager of `a`; bob, user of `a`; carol, user of `b`; and nothing else
    (what an earlier test or case left is gone)."""
    with store.engine.begin() as connection:
        for table in ("users", "projects", "members", "secrets", "changes", "volumes"):
            connection.exec_driver_sql(f"DELETE FROM {table}")
    store.add_project("main", created_by=None)
    store.add_user("root", GlobalRole.ADMIN, token_hash(TOKENS["root"]))
    for name in ("alice", "bob", "carol"):
        store.add_user(name, GlobalRole.USER, token_hash(TOKENS[name]))
    for project in ("a", "b"):
        store.add_project(project, created_by="root")
    store.set_member("a", "alice", ProjectRole.MANAGER)
    store.set_member("a", "bob", ProjectRole.USER)
    store.set_member("b", "carol", ProjectRole.USER)
    store.put_secret(seal_secret(process_keys(), "a", "KEPT", "kept-value", by="alice"))
    store.create_volume(VolumeRecord(id="a/old", project="a", name="old", fleet="local", instance="local"))
