"""A FERRY_HOME of the test's own and its store, as the commands open it (no server); fleets in it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from store import Store, open_store
from tests.cli.cli_records import LOST, instance, put_fleet


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "ferry-home"


@pytest.fixture
def store(home: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite:///{home / 'ferry.db'}")
    yield opened
    opened.engine.dispose()


@pytest.fixture
def fleets(store: Store) -> Store:
    put_fleet(store, "local", backend="local")
    store.put_instances(
        "p", "local",
        [instance("local", "local", address="127.0.0.1", resources='{"cpu": 2.0, "memory": 15.5, "gpu": 0}',
                  blocks=None, busy_blocks=0, in_use='{"cpu": 2.0, "memory": 1.0, "gpu": 0}')],
    )  # fmt: skip
    put_fleet(store, "lab")  # the newer: listed first
    lost = instance(
        "lab-1", "lab", status="unreachable", status_message=LOST, address="", resources="{}", blocks=None,
        busy_blocks=0, jobs=0, in_use="{}",
    )  # fmt: skip
    store.put_instances("p", "lab", [instance("lab-0", "lab"), lost])
    return store
