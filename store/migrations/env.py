"""Alembic's environment for the store's migrations.

store.engine.migrate runs it with the connection it holds (in `config.attributes["connection"]`),
inside a transaction that serialises concurrent upgrades. Run another way (alembic_config(url) with
alembic.command), it opens the configured URL itself, or Ferry's default database.
"""

from alembic import context
from sqlalchemy import Connection
from sqlmodel import SQLModel

import store.models  # noqa: F401  (registers the tables on SQLModel.metadata)
from core.settings import Settings
from store.engine import for_writes, make_engine

config = context.config
target_metadata = SQLModel.metadata


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or Settings.from_env().database_url


def _run_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: Connection) -> None:
    # SQLite alters tables by copying them ("batch" mode); later revisions can then use op.alter_column.
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    # Inside migrate's transaction this begins nothing; on its own it is the upgrade's transaction.
    with context.begin_transaction():
        context.run_migrations()


def _run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(_url())
    try:
        with for_writes(engine).begin() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    _run_offline()
else:
    _run_online()
