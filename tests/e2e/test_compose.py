"""docker-compose.yml is valid for `docker-compose` (Debian's package), as parsed by it: no engine needed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from embedded.devserver import SEARCH_ATTRIBUTE_NAMES
from workflows.search_attributes import SEARCH_ATTRIBUTES

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    binary = shutil.which("docker-compose")
    assert binary is not None, (
        "docker-compose is missing: scripts/test.sh installs it (apt-get install docker-compose)"
    )
    check = subprocess.run(
        [binary, "-f", "docker-compose.yml", "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
    printed = subprocess.run(
        [binary, "-f", "docker-compose.yml", "config"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert printed.returncode == 0, printed.stderr
    parsed: dict[str, Any] = yaml.safe_load(printed.stdout)
    return parsed


def test_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {
        "postgresql", "temporal", "temporal-search-attributes", "temporal-ui", "ferry-db", "ferry-worker",
        "ferry-proxy", "ferry-api",
    }  # fmt: skip
    assert services["temporal"]["image"].startswith("temporalio/auto-setup:")
    assert services["temporal"]["environment"]["DB"] == "postgres12"
    assert services["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgresql"
    assert services["temporal-ui"]["image"].startswith("temporalio/ui:")
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert services["ferry-db"]["image"].startswith("postgres:")


def test_two_ferry_workers_built_from_the_dockerfile(compose: dict[str, Any]) -> None:
    worker = compose["services"]["ferry-worker"]
    assert worker["deploy"]["replicas"] == 2
    assert Path(worker["build"]["context"]) == ROOT
    assert (ROOT / "Dockerfile").read_text().splitlines()[-1] == 'CMD ["ferry", "worker"]'
    env = worker["environment"]
    assert env["FERRY_TEMPORAL_ADDRESS"] == "temporal:7233"
    assert env["FERRY_DATABASE_URL"].startswith("postgresql+psycopg://ferry:ferry@ferry-db:5432/")
    assert worker["depends_on"]["temporal-search-attributes"]["condition"] == "service_completed_successfully"


def test_ferry_search_attributes_are_registered(compose: dict[str, Any]) -> None:
    script = " ".join(compose["services"]["temporal-search-attributes"]["command"])
    names = re.search(r"for name in ([\w ]+); do", script)
    assert names is not None
    assert tuple(names.group(1).split()) == SEARCH_ATTRIBUTE_NAMES
    assert "search-attribute create" in script and "--type Keyword" in script
    # The embedded dev server registers the same ones the workflows set.
    assert tuple(key.name for key in SEARCH_ATTRIBUTES) == SEARCH_ATTRIBUTE_NAMES


def test_the_api_is_served_on_ferrys_store(compose: dict[str, Any]) -> None:
    api = compose["services"]["ferry-api"]
    assert api["command"] == ["python", "-m", "api", "serve", "--host", "0.0.0.0", "--port", "8400"]
    assert (
        api["environment"]["FERRY_DATABASE_URL"]
        == compose["services"]["ferry-worker"]["environment"]["FERRY_DATABASE_URL"]
    )
    assert [(port["target"], port["published"]) for port in api["ports"]] == [(8400, 8400)]
