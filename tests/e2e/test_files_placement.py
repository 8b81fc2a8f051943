"""dstack's `files` at absolute and home paths, end to end through `ferry apply` on the embedded stack
(docs/runs.md#files): a host process finds them under its task's own `files/` (never the host's paths), a
container job at the paths it asked for (a real Podman, testbed/containers.py); and `docker: true` is
refused before anything is submitted, in one line."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.containers import IMAGE, PodmanService
from tests.e2e.conftest import SMALL, Ferry, last_line, podman_stack

DOCKER_LINE = (
    "docker: Ferry does not give a job a container engine; run your image with `image:` (docs/containers.md)"
)


@pytest.fixture(scope="module")
def ferry(tmp_path_factory: pytest.TempPathFactory, podman: PodmanService) -> Iterator[Ferry]:
    with podman_stack(tmp_path_factory, podman) as runner:
        yield runner


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    """The user's machine: a project with the configuration, a private key elsewhere, a directory."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "data.txt").write_text("in the code\n")
    key = tmp_path / "elsewhere" / "id_test"
    key.parent.mkdir()
    key.write_text("the key\n")
    key.chmod(0o600)
    (tmp_path / "elsewhere" / "conf").mkdir()
    (tmp_path / "elsewhere" / "conf" / "a.yml").write_text("a: 1\n")
    return project


def write(project: Path, name: str, body: str) -> str:
    path = project / f"{name}.yml"
    path.write_text(f"type: task\nname: {name}\n{body}{SMALL}")
    return str(path)


def test_a_host_process_gets_absolute_and_home_files_under_its_own_task(ferry: Ferry, sources: Path) -> None:
    key = sources.parent / "elsewhere" / "id_test"
    conf = write(
        sources,
        "hostfiles",
        "files:\n"
        "  - data.txt:in/data.txt\n"
        f"  - {key}:/etc/ferry-files-test/id_test\n"  # an absolute source, an absolute destination
        "  - ../elsewhere/conf:~/conf\n"
        "commands:\n"
        '  - cat in/data.txt "$FERRY_FILE_1" "$FERRY_FILE_2/a.yml"\n'
        '  - test "$FERRY_FILE_0" = "$PWD/in/data.txt"\n'
        '  - test "$FERRY_FILE_1" = "$FERRY_FILES_DIR/abs/etc/ferry-files-test/id_test"\n'
        '  - test "$FERRY_FILE_2" = "$FERRY_FILES_DIR/home/conf"\n'
        "  - test ! -e /etc/ferry-files-test\n"
        '  - stat -c %a "$FERRY_FILE_1"\n'
        "  - ls -A\n",
    )
    result = ferry("apply", "-y", "-f", conf, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "in the code",
        "the key",
        "a: 1",
        "600",  # private on the user's machine, private in the job
        "data.txt",
        "hostfiles.yml",
        "in",  # nothing of Ferry's own in the code
    ]
    assert "warning" not in result.stderr
    assert not Path("/etc/ferry-files-test").exists()


def test_a_container_job_reads_files_at_the_paths_it_asked_for(ferry: Ferry, sources: Path) -> None:
    conf = write(
        sources,
        "boxedfiles",
        f"image: {IMAGE}\n"
        "files:\n"
        "  - ../elsewhere/id_test:/opt/keys/id_test\n"
        "  - ../elsewhere/conf:~/conf\n"
        "commands:\n"
        "  - cat /opt/keys/id_test /root/conf/a.yml\n"
        '  - echo "$FERRY_FILE_0 $FERRY_FILE_1"\n'
        "  - ls -A /workflow\n",
    )
    result = ferry("apply", "-y", "-f", conf, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "the key",
        "a: 1",
        "/opt/keys/id_test /root/conf",
        "boxedfiles.yml",
        "data.txt",
    ]


def test_a_missing_source_is_said_in_one_line_before_submission(ferry: Ferry, sources: Path) -> None:
    conf = write(sources, "missing", "files: [nowhere.txt:/opt/x]\ncommands: [echo never]\n")
    result = ferry("apply", "-y", "-f", conf)
    assert result.returncode != 0
    assert "files: nowhere.txt:/opt/x: no such file or directory" in last_line(result.stderr)
    assert "missing" not in ferry("ps", "-a").stdout


def test_docker_true_is_refused_by_validate_and_apply(ferry: Ferry, sources: Path) -> None:
    conf = write(sources, "dind", "docker: true\ncommands: [docker ps]\n")
    for command in ("validate", "apply"):
        args = [command, "-f", conf] if command == "validate" else [command, "-y", "-f", conf]
        result = ferry(*args)
        assert result.returncode == 2, result.stderr
        assert last_line(result.stderr).endswith(f"{os.path.basename(conf)}:3: {DOCKER_LINE}"), result.stderr
    assert "dind" not in ferry("ps", "-a").stdout
