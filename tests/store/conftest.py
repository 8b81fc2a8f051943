"""A fresh, migrated SQLite store in each test's tmp_path."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from store.engine import make_engine, migrate
from store.repository import Store


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ferry.db'}"


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    engine = make_engine(db_url)
    migrate(engine)
    yield Store(engine)
    engine.dispose()
