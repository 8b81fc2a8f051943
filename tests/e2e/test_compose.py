"""docker-compose.yml is valid for `docker-compose` (Debian's package), as parsed by it: no engine needed.
It publishes only Ferry's API and the services proxy, and holds no password
(docs/deployment.md#docker-compose).
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from embedded.devserver import SEARCH_ATTRIBUTE_NAMES
from workflows.search_attributes import SEARCH_ATTRIBUTES

ROOT = Path(__file__).parents[2]
# What the documented one-liner writes into .env: values no file holds.
SECRETS = {
    "TEMPORAL_DB_PASSWORD": "t3mp0ral-db-4c1e",
    "FERRY_DB_PASSWORD": "f3rry-db-9b2d",
    "FERRY_CODEC_KEY": "Y29kZWMta2V5LW9mLXRoZS10ZXN0LTMyLWJ5dGVzISE=",
}


def compose_config(
    env_file: Path, environment: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """`docker-compose config` of docker-compose.yml with only `environment` and `env_file` (not a .env of
    this checkout's) to fill its variables."""
    binary = shutil.which("docker-compose")
    assert binary is not None, (
        "docker-compose is missing: scripts/test.sh installs it (apt-get install docker-compose)"
    )
    return subprocess.run(
        [binary, "-f", "docker-compose.yml", "--env-file", str(env_file), "config", *args],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **environment},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    empty = tmp_path_factory.mktemp("compose") / "empty.env"
    empty.write_text("")
    check = compose_config(empty, SECRETS, "-q")
    assert check.returncode == 0, check.stderr
    printed = compose_config(empty, SECRETS)
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
    password = SECRETS["FERRY_DB_PASSWORD"]
    assert env["FERRY_DATABASE_URL"] == f"postgresql+psycopg://ferry:{password}@ferry-db:5432/ferry"
    assert worker["depends_on"]["temporal-search-attributes"]["condition"] == "service_completed_successfully"


def test_the_image_holds_every_package_ferry_installs() -> None:
    """The API and the proxy run from the workers' image: each of pyproject's packages is copied in."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {name.rstrip("*") for name in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = set(re.findall(r"^COPY (\w+) \1$", (ROOT / "Dockerfile").read_text(), re.M))
    assert packages <= copied, f"not in the Dockerfile: {sorted(packages - copied)}"


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


def published(service: dict[str, Any]) -> list[tuple[str, int]]:
    """(host address, host port) of each port `service` publishes; "" for every address."""
    found = []
    for port in service.get("ports", []):
        if isinstance(port, str):  # "[HOST_IP:]PUBLISHED:TARGET[/PROTOCOL]", an IPv4 HOST_IP
            parts = port.split("/")[0].split(":")
            found.append((parts[0] if len(parts) == 3 else "", int(parts[-2])))
        else:
            found.append((port.get("host_ip", ""), int(port["published"])))
    return found


def test_only_the_api_and_the_proxy_are_published_to_the_network(compose: dict[str, Any]) -> None:
    exposed = {
        (name, port)
        for name, service in compose["services"].items()
        for host, port in published(service)
        if not host or not ipaddress.ip_address(host).is_loopback
    }
    assert exposed == {("ferry-api", 8400), ("ferry-proxy", 8300)}
    # The Web UI has no authentication: on the host's loopback only (an SSH tunnel from elsewhere).
    assert published(compose["services"]["temporal-ui"]) == [("127.0.0.1", 8080)]
    for name in ("temporal", "postgresql", "ferry-db", "ferry-worker"):
        assert "ports" not in compose["services"][name], name


def test_no_service_holds_a_literal_password(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["postgresql"]["environment"]["POSTGRES_PASSWORD"] == SECRETS["TEMPORAL_DB_PASSWORD"]
    assert services["temporal"]["environment"]["POSTGRES_PWD"] == SECRETS["TEMPORAL_DB_PASSWORD"]
    assert services["ferry-db"]["environment"]["POSTGRES_PASSWORD"] == SECRETS["FERRY_DB_PASSWORD"]
    urls = {
        name: services[name]["environment"]["FERRY_DATABASE_URL"]
        for name in ("ferry-worker", "ferry-proxy", "ferry-api")
    }
    assert set(urls.values()) == {
        f"postgresql+psycopg://ferry:{SECRETS['FERRY_DB_PASSWORD']}@ferry-db:5432/ferry"
    }
    # In the file itself every password and key is a variable that must be set.
    text = (ROOT / "docker-compose.yml").read_text()
    secret = re.compile(r"PASSWORD|_PWD|CODEC_KEY|://[^/@\s]+:[^/@\s]+@")  # a URL with a password
    for line in text.splitlines():
        if secret.search(line) and not line.lstrip().startswith("#"):
            assert "${" in line and ":?" in line, line


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_a_missing_secret_stops_docker_compose_with_its_name(tmp_path: Path, missing: str) -> None:
    empty = tmp_path / "empty.env"
    empty.write_text("")
    refused = compose_config(empty, {k: v for k, v in SECRETS.items() if k != missing}, "-q")
    assert refused.returncode != 0
    assert f"set {missing}" in refused.stderr, refused.stderr


def test_the_documented_one_liner_makes_an_env_file_compose_takes(tmp_path: Path) -> None:
    """docs/deployment.md's command, run as written: a private .env with every secret, none of them the
    same; and it leaves an existing .env alone."""
    doc = (ROOT / "docs" / "deployment.md").read_text()
    [command] = re.findall(r"```bash\n(\[ -e \.env \] \|\|[^\n]*)\n", doc)
    made = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    env_file = tmp_path / ".env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    values = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert set(values) == set(SECRETS) and len(set(values.values())) == len(values)
    assert compose_config(env_file, {}, "-q").returncode == 0
    again = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert (
        again.returncode == 0
        and dict(line.split("=", 1) for line in env_file.read_text().splitlines()) == values
    )
