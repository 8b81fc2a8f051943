"""The chaos suite's profile (FERRY_CHAOS=long: the long one) and its PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.chaos.stream import Profile, profile_from_env
from tests.store.postgres_server import PostgresServer, find_binaries, running_server


@pytest.fixture(scope="session")
def profile() -> Profile:
    return profile_from_env()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    binaries = find_binaries()
    if binaries is None:
        pytest.fail("PostgreSQL's server is not installed: apt-get install postgresql (scripts/test.sh does)")
    with running_server(binaries) as server:
        yield server
