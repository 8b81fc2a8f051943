"""`image:` through the whole of Ferry: `ferry apply` of a container task and of a container service on
the embedded stack, whose agent reaches a real Podman through DOCKER_HOST (testbed/containers.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testbed.containers import ENTRYPOINT_IMAGE, ENTRYPOINT_WORDS, IMAGE, PodmanService, podman_service
from tests.e2e.conftest import SMALL, Ferry, ferry_env, last_line, stack_of


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanService]:
    with podman_service(tmp_path_factory.mktemp("podman")) as service:
        yield service


@pytest.fixture(scope="module")
def ferry(tmp_path_factory: pytest.TempPathFactory, podman: PodmanService) -> Iterator[Ferry]:
    home = tmp_path_factory.mktemp("ferry-home")
    with stack_of(Ferry(home, {**ferry_env(home), **podman.env, "DOCKER_HOST": podman.url})) as runner:
        yield runner


def write(directory: Path, name: str, text: str) -> str:
    path = directory / f"{name}.yml"
    path.write_text(text + SMALL)
    return str(path)


def test_a_container_task_runs_with_its_code_and_logs(ferry: Ferry, tmp_path: Path) -> None:
    conf = write(
        tmp_path,
        "boxed",
        f"type: task\nname: boxed\nimage: {IMAGE}\nenv: [WORD=boxed]\n"
        'commands:\n  - pwd\n  - echo "$WORD in $FERRY_RUN_NAME"\n  - ls boxed.yml\n',
    )
    result = ferry("apply", "-y", "-f", conf, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["/workflow", "boxed in boxed", "boxed.yml"]
    assert last_line(result.stderr) == "run boxed: done (all jobs done)"
    assert "warning" not in result.stderr  # `image` is acted on


def test_without_commands_the_image_entrypoint_runs(ferry: Ferry, tmp_path: Path) -> None:
    conf = write(tmp_path, "entry", f"type: task\nname: entry\nimage: {ENTRYPOINT_IMAGE}\n")
    result = ferry("apply", "-y", "-f", conf, timeout=180)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ENTRYPOINT_WORDS


def test_a_container_service_is_served_through_its_published_port(ferry: Ferry, tmp_path: Path) -> None:
    conf = write(
        tmp_path,
        "boxweb",
        f"type: service\nname: boxweb\nimage: {IMAGE}\nport: 8000\nauth: false\nreplicas: 2\n"
        'commands:\n  - mkdir -p /tmp/www\n  - echo "replica $FERRY_REPLICA_NUM" > /tmp/www/index.html\n'
        "  - httpd -f -p 8000 -h /tmp/www\n",
    )
    result = ferry("apply", "-y", "-d", "-f", conf, timeout=180)
    assert result.returncode == 0, result.stderr
    url = next(word for word in result.stdout.split() + result.stderr.split() if "/proxy/services/" in word)
    seen: set[str] = set()
    for _ in range(600):
        try:
            answer = httpx.get(url, timeout=5)
        except httpx.HTTPError:
            answer = None
        if answer is not None and answer.status_code == 200:
            seen.add(answer.text.strip())
        if len(seen) == 2:
            break
        time.sleep(0.1)
    assert seen == {"replica 0", "replica 1"}
    stopped = ferry("stop", "-y", "boxweb", timeout=120)
    assert stopped.returncode == 0, stopped.stderr
