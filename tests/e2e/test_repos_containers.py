"""dstack's `repos` in a container job (docs/runs.md#repos), end to end on the embedded stack with a real
Podman (testbed/containers.py): the agent clones on the host and the container sees each clone at the path
it asked for (in /workflow, absolute, `~`), as `files` are bound; a local repo at an absolute path too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.containers import IMAGE, PodmanService
from testbed.git_servers import Remote, git_daemon, make_remote
from tests.e2e.conftest import SMALL, Ferry, podman_stack


@pytest.fixture(scope="module")
def ferry(tmp_path_factory: pytest.TempPathFactory, podman: PodmanService) -> Iterator[Ferry]:
    with podman_stack(tmp_path_factory, podman) as runner:
        yield runner


@pytest.fixture(scope="module")
def public(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Remote]]:
    root = tmp_path_factory.mktemp("remotes")
    remote = make_remote(root, "repo")
    with git_daemon(root / "served") as daemon:
        yield f"{daemon}/repo.git", remote


def test_a_container_job_sees_its_clones_at_the_paths_it_asked_for(
    ferry: Ferry, public: tuple[str, Remote], tmp_path: Path
) -> None:
    url, _ = public
    project, lib = tmp_path / "project", tmp_path / "lib"
    project.mkdir()
    lib.mkdir()
    (project / "here.txt").write_text("the code\n")
    (lib / "m.py").write_text("local lib\n")
    conf = project / "boxedrepos.yml"
    conf.write_text(
        f"type: task\nname: boxedrepos\nimage: {IMAGE}\n"
        "repos:\n"
        f"  - {{url: {url}, path: src}}\n"  # in the code: /workflow/src
        f"  - {{url: {url}, branch: dev, path: /opt/dev}}\n"
        f"  - {url}:~/home-clone\n"
        "  - ../lib:/opt/lib\n"
        "commands:\n"
        "  - cat /workflow/src/a.txt /opt/dev/dev.txt /root/home-clone/a.txt /opt/lib/m.py\n"
        "  - ls -A /workflow\n" + SMALL
    )
    result = ferry("apply", "-y", "-f", str(conf), timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "main two",
        "on dev",
        "main two",
        "local lib",
        "boxedrepos.yml",  # no repo at the working directory: the configuration's directory is the code
        "here.txt",
        "src",
    ]
    assert "warning" not in result.stderr
