"""The CLI's store, as FERRY_DATABASE_URL (or FERRY_HOME's SQLite) says: a SQLite file made private first."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.settings import Settings
    from store import Store


def open_home_store(settings: Settings) -> Store:
    from store import open_store

    _private_database(settings)
    return open_store(settings.database_url)


def _private_database(settings: Settings) -> None:
    """The SQLite store created 0600 (in FERRY_HOME created 0700) before SQLite creates it with the
    umask's mode: it holds every run's env. SQLite gives its -wal and -shm the database's mode."""
    from sqlalchemy.engine import make_url

    from embedded.processes import PRIVATE_FILE, private_dir

    url = make_url(settings.database_url)
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database.startswith("file:"):
        return
    if database == ":memory:":
        return
    path = Path(database)
    if path.parent == settings.home:
        private_dir(path.parent)
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
