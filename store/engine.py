"""Engines and migrations (store.opening keeps the process's stores over them).

SQLite is tuned for several writer processes at once: WAL (readers never wait on the writer), a
10 s busy timeout (writers queue instead of failing with "database is locked"), and write
transactions that take the write lock at BEGIN (see `for_writes`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, func, inspect, select, text
from sqlalchemy.engine import make_url

from core.settings import Settings

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# The newest revision in migrations/versions (a test keeps it equal to Alembic's head): a store already
# there is opened without importing Alembic, which costs every CLI command about 0.3 s.
HEAD_REVISION = "0016"

# The execution option that makes a SQLite transaction BEGIN IMMEDIATE (see `for_writes`).
_WRITE_OPTION = "ferry_write"
# The PostgreSQL advisory lock that serialises concurrent `migrate` calls (any fixed number).
_MIGRATION_LOCK_KEY = 0x66657272


def make_engine(url: str | None = None) -> Engine:
    """An engine for `url` (default: Settings.from_env().database_url), tuned for concurrent writers."""
    parsed = make_url(url or Settings.from_env().database_url)
    if parsed.get_backend_name() != "sqlite":
        # Workers live long and hold pooled connections across server restarts.
        return create_engine(parsed, pool_pre_ping=True)
    database = parsed.database
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    # Activities call the store from several threads; the pool hands each one its own connection.
    engine = create_engine(parsed, connect_args={"check_same_thread": False})
    event.listen(engine, "connect", _on_sqlite_connect)
    event.listen(engine, "begin", _on_sqlite_begin)
    return engine


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # We emit BEGIN ourselves (_on_sqlite_begin): the driver's own transaction handling would
    # autocommit reads and DDL, and cannot begin IMMEDIATE transactions.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # The busy timeout first, so that switching a new database to WAL waits for other processes.
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _on_sqlite_begin(connection: Connection) -> None:
    write = connection.get_execution_options().get(_WRITE_OPTION, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def for_writes(engine: Engine) -> Engine:
    """The same engine (and pool), whose SQLite transactions take the write lock at BEGIN.

    A deferred SQLite transaction that reads and then writes fails at once with SQLITE_BUSY, without
    waiting out the busy timeout, when another connection wrote in between; a transaction that
    begins IMMEDIATE waits for the lock up front and then cannot be refused. Other databases ignore it.
    """
    return engine.execution_options(**{_WRITE_OPTION: True})


def alembic_config(url: str | None = None) -> Config:
    """An Alembic configuration for the store's migrations, with no alembic.ini.

    For a new revision: `command.revision(alembic_config(url), message=..., autogenerate=True)`.
    """
    from alembic.config import Config

    config = Config()
    # ConfigParser interpolates "%"; paths and URLs are taken literally.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.set_main_option("path_separator", "os")
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def migrate(engine_or_url: Engine | str | None = None) -> None:
    """Upgrades the database to the newest revision; a no-op when it is there already.

    Safe to call from several processes at once: the upgrade runs in one transaction that holds
    SQLite's write lock (or a PostgreSQL advisory lock) and re-reads the version inside it.
    """
    engine = engine_or_url if isinstance(engine_or_url, Engine) else make_engine(engine_or_url)
    owned = engine is not engine_or_url
    try:
        # Most calls find the database up to date; checking takes no write lock.
        if _stored_revisions(engine) == {HEAD_REVISION}:
            return
        from alembic import command

        config = alembic_config()
        with for_writes(engine).begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(select(func.pg_advisory_xact_lock(_MIGRATION_LOCK_KEY)))
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    finally:
        if owned:
            engine.dispose()


def _stored_revisions(engine: Engine) -> set[str]:
    """The revisions Alembic's version table names (none for a new database)."""
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return set()
        return {row[0] for row in connection.execute(text("SELECT version_num FROM alembic_version"))}
