"""`image:` through the whole of Ferry: `ferry apply` of a container task, of a `python:` task and of a
container service on the embedded stack, whose agent reaches a real Podman through DOCKER_HOST
(testbed/containers.py; its Python images, FERRY_PYTHON_IMAGE, are made of the host's own Python)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from embedded.local_agent import stop_local_agent
from testbed.containers import (
    ENTRYPOINT_IMAGE,
    ENTRYPOINT_WORDS,
    IMAGE,
    PYTHON_IMAGES,
    PodmanService,
    build_python_image,
    host_python_version,
    require_podman,
)
from testbed.registry import local_registry, push_fresh_image
from tests.e2e.conftest import SMALL, Ferry, ferry_env, last_line, podman_stack, stack_of


@pytest.fixture(scope="module")
def ferry(tmp_path_factory: pytest.TempPathFactory, podman: PodmanService) -> Iterator[Ferry]:
    with podman_stack(tmp_path_factory, podman, FERRY_PYTHON_IMAGE=PYTHON_IMAGES) as runner:
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


def test_python_runs_the_job_in_an_image_of_that_python(
    ferry: Ferry, podman: PodmanService, tmp_path: Path
) -> None:
    # The agent's Python images are made here of the host's Python (no registry): the job runs in one.
    version = host_python_version()
    build_python_image(require_podman(), tmp_path, {**os.environ, **podman.env})
    conf = write(
        tmp_path,
        "snake",
        f'type: task\nname: snake\npython: "{version}"\n'
        "commands:\n  - python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2], sys.executable)'\n"
        "  - ls /etc/debian_version || echo no debian here\n",
    )
    result = ferry("apply", "-y", "-f", conf, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    # Its own Python, in a container: the host's /etc/debian_version is not there.
    assert result.stdout.splitlines()[0] == f"{version} /usr/bin/python3"
    assert "no debian here" in result.stdout
    assert "warning" not in result.stderr  # `python` is acted on


def test_ferry_ps_shows_how_far_a_pull_is(ferry: Ferry, podman: PodmanService, tmp_path: Path) -> None:
    # A real pull from a registry on loopback (testbed/registry.py), slowed to last about 16 s: the job's
    # START_JOB step heartbeats the agent's progress line every 8 s or so, and ps reads it (cli/pulls.py).
    with local_registry(tmp_path / "registry", podman) as registry:
        image = push_fresh_image(podman, registry, tmp_path, megabytes=24)
        registry.relay.rate = 1_500_000
        conf = write(
            tmp_path, "pulled", f"type: task\nname: pulled\nimage: {image}\ncommands: [ls /noise.bin]\n"
        )
        applied = ferry("apply", "-y", "-d", "-f", conf, timeout=60)
        assert applied.returncode == 0, applied.stderr
        shown: list[tuple[str, str]] = []  # (status, message) of the job as ps showed them
        for _ in range(300):
            runs = json.loads(ferry("ps", "-a", "--json").stdout)
            jobs = [job for run in runs if run["name"] == "pulled" for job in run["jobs"]]
            if jobs:
                shown.append((jobs[0]["status"], jobs[0].get("pull", "")))
                if jobs[0]["status"] not in {"submitted", "provisioning", "pulling"}:
                    break
            time.sleep(0.2)
        logs = ferry("logs", "pulled", timeout=60)
    pulls = [message for status, message in shown if status == "pulling" and message]
    assert any(message.startswith(f"pulling {image}: 0/1 layers, ") for message in pulls), shown
    assert "/noise.bin" in logs.stdout


def answers(url: str, count: int, *, tries: int) -> set[str]:
    """The distinct answers of the service at `url`, until there are `count` of them (or `tries` are made,
    0.1 s apart): its replicas, as the proxy balances between them."""
    seen: set[str] = set()
    for _ in range(tries):
        try:
            answer = httpx.get(url, timeout=5)
        except httpx.HTTPError:
            answer = None
        if answer is not None and answer.status_code == 200:
            seen.add(answer.text.strip())
        if len(seen) == count:
            break
        time.sleep(0.1)
    return seen


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
    assert answers(url, 2, tries=600) == {"replica 0", "replica 1"}
    # Bridged on the shared local instance: ps says where each replica's port is published
    # (docs/containers.md#networks).
    table = ferry("ps").stdout
    assert table.count("ports 8000->") == 2, table
    stopped = ferry("stop", "-y", "boxweb", timeout=120)
    assert stopped.returncode == 0, stopped.stderr


def test_replica_groups_run_in_their_own_image_or_on_the_host(ferry: Ferry, tmp_path: Path) -> None:
    """dstack's replica groups with an `image` of their own (docs/services.md#replica-groups): one group's
    replica in the image, the other's on the host, both behind the service's one URL."""
    port = 18473
    conf = write(
        tmp_path,
        "mixed",
        f"type: service\nname: mixed\nport: {port}\nauth: false\nreplicas:\n"
        f"  - name: box\n    count: 1\n    image: {IMAGE}\n    commands:\n"
        '      - mkdir -p /tmp/www && echo "box $(cat /proc/1/comm)" > /tmp/www/index.html\n'
        f"      - httpd -f -p {port} -h /tmp/www\n"
        "  - name: host\n    count: 1\n    commands:\n"
        '      - mkdir -p www && echo "host" > www/index.html\n'
        f"      - cd www && exec python3 -m http.server {port}\n",
    )
    result = ferry("apply", "-y", "-d", "-f", conf, timeout=180)
    assert result.returncode == 0, result.stderr
    assert "does not act on" not in result.stderr  # a group's image is acted on now
    url = next(word for word in result.stdout.split() + result.stderr.split() if "/proxy/services/" in word)
    try:
        # In the image, PID 1 is the container's own command; on the host there is no such answer.
        assert answers(url, 2, tries=900) == {"box sh", "host"}
        table = ferry("ps").stdout
        assert table.count("ports ") == 1, table  # only the container's port is published
    finally:
        ferry("stop", "-y", "-x", "mixed", timeout=120)


def test_an_engine_brought_up_after_ferrys_first_run_is_used_once_the_stack_starts_again(
    podman: PodmanService, tmp_path: Path
) -> None:
    """docs/fleets.md#what-an-instance-is: Ferry used first on a machine without an engine (no socket
    served, no podman on the PATH), then Podman's socket brought up and the stack started again: the local
    instance is described anew, and an `image:` task runs, in the same FERRY_HOME."""
    home = tmp_path / "home"
    bare = tmp_path / "bin"  # the PATH's programs but podman and docker: a machine without an engine
    bare.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        for program in Path(directory).glob("*") if Path(directory).is_dir() else []:
            if program.name not in ("podman", "docker") and not (bare / program.name).exists():
                (bare / program.name).symlink_to(program)
    (tmp_path / "project").mkdir()  # its code: not the PATH above
    text = f"type: task\nname: late\nimage: {IMAGE}\ncommands: [echo engine found]\n"
    conf = write(tmp_path / "project", "late", text)
    without = Ferry(home, {**ferry_env(home), "PATH": str(bare)})
    with stack_of(without):
        refused = without("apply", "-y", "-f", conf, timeout=180)
        assert refused.returncode != 0
        assert "needs a container engine" in refused.stdout + refused.stderr
    stop_local_agent(home)  # `server stop` leaves this machine's agent running: it starts with the stack

    served = Ferry(home, {**ferry_env(home), **podman.env, "DOCKER_HOST": podman.url})
    with stack_of(served):
        ran = served("apply", "-y", "-f", conf, timeout=180)
        assert ran.returncode == 0, ran.stderr
        assert "engine found" in ran.stdout
        listed = json.loads(served("fleet", "list", "--json").stdout)
        [local] = [i for fleet in listed for i in fleet["instances"] if i["name"] == "local"]
        assert local["container_engine"] and local["container_engine"].startswith("podman")
