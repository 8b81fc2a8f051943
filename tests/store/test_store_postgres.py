"""The store against a real PostgreSQL server, as docker-compose.yml deploys it: the migrations, the
repository's scenarios, and two worker processes writing the same runs at once.

One server for the module (tests/store/postgres_server.py); each test gets a database copied from one
migrated template, so a test costs a CREATE DATABASE, not a migration.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import get_context
from types import ModuleType
from typing import Any

import pytest
from alembic import command

from core.status import JobStatus, RunStatus
from store.engine import HEAD_REVISION, alembic_config, make_engine, migrate
from store.opening import open_store
from store.repository import Store
from tests.store import (
    test_service_store,
    test_store_fleets,
    test_store_repository,
    test_store_run_deletion,
    test_store_volumes,
)
from tests.store.postgres_server import PostgresServer, find_binaries, start_server
from tests.store.test_store_concurrency import SHARED_JOB, _check, _expected_log, _write
from tests.store.test_store_engine import TABLES, _revision, _tables
from tests.store.test_store_repository import _job, _run

TEMPLATE = "ferry_template"
WRITERS = 2  # worker processes
ROUNDS = 50  # each worker's puts of the shared run, submission and code archive
ARCHIVE = b"the run's code, sent by every attempt"


def _scenarios(*modules: ModuleType) -> dict[str, Callable[..., Any]]:
    """The modules' tests, to be collected here again, where `store` and `db_url` are PostgreSQL's."""
    found: dict[str, Callable[..., Any]] = {}
    for module in modules:
        for name, test in vars(module).items():
            if name.startswith("test_") and callable(test):
                assert name not in found, f"two scenarios named {name}"
                found[name] = test
    return found


# The secrets' scenarios stay SQLite's: one reads the database file to find no plain value in it.
globals().update(
    _scenarios(
        test_store_repository,
        test_store_fleets,
        test_store_volumes,
        test_service_store,
        test_store_run_deletion,
    )
)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    binaries = find_binaries()
    if binaries is None:
        pytest.fail("PostgreSQL's server is not installed: apt-get install postgresql (scripts/test.sh does)")
    server = start_server(binaries)
    try:
        migrate(server.create_database(TEMPLATE))
        yield server
    finally:
        server.stop()


_databases = itertools.count()


@pytest.fixture
def db_url(postgres: PostgresServer) -> str:
    """A new database with the store's tables, empty."""
    return postgres.create_database(f"test_{next(_databases)}", template=TEMPLATE)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    engine = make_engine(db_url)
    migrate(engine)  # up to date already: a read of the version
    yield Store(engine)
    engine.dispose()


def test_migrations_upgrade_a_new_database_to_the_models(postgres: PostgresServer) -> None:
    url = postgres.create_database("migrated")
    migrate(url)
    assert _tables(url) == TABLES
    assert _revision(url) == (HEAD_REVISION,)
    # Autogenerate, by the migrations' own environment, finds nothing in the models to add: raises if so.
    command.check(alembic_config(url))
    command.downgrade(alembic_config(url), "base")
    assert _tables(url) == set()
    migrate(url)
    assert _tables(url) == TABLES


def _put_records(store: Store) -> None:
    """What every worker's activities write of one run: its record, its submission's, its code."""
    for _ in range(ROUNDS):
        store.put_run(_run("run", status=RunStatus.RUNNING))
        job = _job("run")
        job.status = JobStatus.RUNNING
        store.put_job_submission(job)
        store.record_changes("run", {"status": RunStatus.RUNNING}, (0, []), [(job, 0, [])])
        store.put_code(ARCHIVE)


def _worker(url: str, writer: int) -> None:
    # A fresh interpreter on a new database: it migrates it, perhaps at the same time as the other.
    store = open_store(url)
    with ThreadPoolExecutor(2) as threads:
        done = [threads.submit(_write, store, writer), threads.submit(_put_records, store)]
        for future in done:
            future.result()  # re-raises a thread's error
    store.engine.dispose()


def test_two_worker_processes_write_the_same_runs(postgres: PostgresServer) -> None:
    """Each worker sends its eventlog, the shared eventlog and log (overlapping, as retries do), and puts
    the same run, submission and code: nothing fails, is lost, or is stored twice."""
    url = postgres.create_database("workers")  # not migrated: the workers do it
    with get_context("spawn").Pool(WRITERS) as pool:
        pool.starmap(_worker, [(url, writer) for writer in range(WRITERS)])  # re-raises a worker's error
    assert _revision(url) == (HEAD_REVISION,)
    store = open_store(url)
    try:
        _check(store, WRITERS)
        [run] = store.list_runs()
        assert (run.id, run.status) == ("run", RunStatus.RUNNING)
        [job] = store.list_job_submissions("run")
        # The log's size survives the records put while it grew (they keep the stored log's size).
        assert (job.id, job.log_size) == (SHARED_JOB, len(_expected_log()))
        assert store.get_code(store.put_code(ARCHIVE)) == ARCHIVE
        with store.engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT count(*) FROM code_archives").scalar() == 1
    finally:
        store.engine.dispose()
