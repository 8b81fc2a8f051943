"""Engines, settings, migrations and the per-process store cache."""

import io
import multiprocessing
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlmodel import SQLModel

import store.models  # noqa: F401  (the tables the migrations must match)
from store.engine import HEAD_REVISION, alembic_config, make_engine, migrate
from store.opening import open_store
from store.repository import Store

TABLES = {
    "backends",
    "changes",
    "runs",
    "job_submissions",
    "events",
    "log_chunks",
    "code_archives",
    "fleets",
    "instances",
    "service_replicas",
    "gateways",
    "replica_drains",
    "service_requests",
    "users",
    "projects",
    "members",
    "run_tokens",
    "volumes",
    "secrets",
    "queued_jobs",
}


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _revision(url: str) -> tuple[str, ...]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return tuple(MigrationContext.configure(connection).get_current_heads())
    finally:
        engine.dispose()


def test_sqlite_engine_creates_the_directory_and_tunes_every_connection(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a' / 'b' / 'ferry.db'}"
    engine = make_engine(url)
    try:
        for _ in range(2):  # a second pooled connection is tuned too
            with engine.connect() as connection:
                assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
                assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
                assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10000
        assert (tmp_path / "a" / "b").is_dir()
    finally:
        engine.dispose()


def test_sqlite_transactions_are_real_transactions(db_url: str) -> None:
    # The driver no longer autocommits: a rolled-back write (DDL included) leaves nothing behind.
    engine = make_engine(db_url)
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("CREATE TABLE t (x INTEGER)")
            connection.exec_driver_sql("INSERT INTO t VALUES (1)")
            connection.rollback()
        assert "t" not in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_migrations_match_the_models(db_url: str) -> None:
    migrate(db_url)
    assert _tables(db_url) == TABLES
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, SQLModel.metadata) == []
    finally:
        engine.dispose()


def test_migrate_twice_is_a_no_op(store: Store, db_url: str) -> None:
    code_hash = store.put_code(b"kept")
    revision = _revision(db_url)
    migrate(db_url)
    migrate(store.engine)
    assert _revision(db_url) == revision == (HEAD_REVISION,)
    assert store.get_code(code_hash) == b"kept"


def test_downgrade_then_upgrade(db_url: str) -> None:
    migrate(db_url)
    command.downgrade(alembic_config(db_url), "base")
    assert _tables(db_url) == set()
    migrate(db_url)
    assert _tables(db_url) == TABLES


def test_migrations_render_for_postgresql() -> None:
    # No server needed: offline mode writes the DDL a PostgreSQL upgrade would run.
    config = alembic_config("postgresql://ferry@localhost/ferry")
    config.output_buffer = io.StringIO()
    command.upgrade(config, "head", sql=True)
    sql = config.output_buffer.getvalue()
    assert "CREATE TABLE runs" in sql
    assert "id BIGSERIAL NOT NULL" in sql
    assert "CONSTRAINT uq_events_run_job_seq UNIQUE (run_id, job_submission_id, seq)" in sql
    assert "data BYTEA NOT NULL" in sql


def test_default_database_is_under_ferry_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FERRY_DATABASE_URL", raising=False)
    store = open_store()
    store.put_code(b"x")
    assert (tmp_path / "home" / "ferry.db").is_file()
    store.engine.dispose()


def test_ferry_database_url_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'elsewhere' / 'state.db'}"
    monkeypatch.setenv("FERRY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FERRY_DATABASE_URL", url)
    store = open_store()
    assert open_store(url) is store  # migrated once, then cached for the process
    store.put_code(b"x")
    assert (tmp_path / "elsewhere" / "state.db").is_file()
    assert not (tmp_path / "home").exists()
    store.engine.dispose()


def _use_inherited_store(url: str, queue: "multiprocessing.Queue[str]") -> None:
    queue.put(open_store(url).put_code(b"from the child"))


def test_a_forked_child_can_use_its_parents_store(db_url: str) -> None:
    parent = open_store(db_url)
    parent.put_code(b"from the parent")
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[str] = context.Queue()
    child = context.Process(target=_use_inherited_store, args=(db_url, queue))
    child.start()
    code_hash = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert parent.get_code(code_hash) == b"from the child"
    parent.engine.dispose()


def test_head_revision_is_alembics_head() -> None:
    """store.engine opens an up-to-date store without Alembic by naming the head revision itself."""
    from alembic.script import ScriptDirectory

    from store.engine import HEAD_REVISION

    assert ScriptDirectory.from_config(alembic_config()).get_heads() == [HEAD_REVISION]


def test_an_up_to_date_store_opens_without_alembic(tmp_path: Path) -> None:
    """Every CLI command opens the store: importing Alembic there cost each one about 0.3 s."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    migrate(url)
    code = f"import sys; import store.opening as o; o.open_store({url!r}); print('alembic' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"
