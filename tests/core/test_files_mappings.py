"""dstack's `files` in every documented form (docs/runs.md#files): where each destination goes, how the
archive carries it, and what the agent makes of it; and `docker: true`, refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agent.containers.config import WORKFLOW_DIR
from agent.files import container_binds, container_home, container_path, host_paths
from agent.records import TaskPaths
from core.configuration import TaskConfiguration, parse_configuration
from core.configuration.code_sources import (
    CONTAINER_CODE_DIR,
    FileMapping,
    archive_path,
    code_path,
    destination,
)
from core.configuration.runnable import DOCKER_REFUSED, refusals
from core.files_manifest import Placed, manifest, placed_at, read_manifest


def run(**fields: object) -> TaskConfiguration:
    conf = parse_configuration({"type": "task", "commands": ["true"], **fields})
    assert isinstance(conf, TaskConfiguration)
    return conf


@pytest.mark.parametrize(
    ("mapping", "working_dir", "where", "in_code", "in_archive"),
    [
        # dstack's own examples (docs/concepts/tasks.md#files)
        (".:examples", None, "/workflow/examples", "examples", "examples"),
        (
            "~/.ssh/id_rsa:/root/.ssh/id_rsa",
            None,
            "/root/.ssh/id_rsa",
            None,
            ".ferry-files/abs/root/.ssh/id_rsa",
        ),
        ("~/.ssh/id_rsa", None, "~/.ssh/id_rsa", None, ".ferry-files/home/.ssh/id_rsa"),
        ("../examples", None, "/examples", None, ".ferry-files/abs/examples"),
        ("../configs:~/configs", None, "~/configs", None, ".ferry-files/home/configs"),
        ("train.py", None, "/workflow/train.py", "train.py", "train.py"),
        # relative to a relative working_dir, which is under the code
        ("a.txt:in/a.txt", "src", "/workflow/src/in/a.txt", "src/in/a.txt", "src/in/a.txt"),
        ("a.txt:../a.txt", "src", "/workflow/a.txt", "a.txt", "a.txt"),
        # an absolute working_dir is where a host process starts too: never the code
        ("a.txt", "/app", "/app/a.txt", None, ".ferry-files/abs/app/a.txt"),
        ("x:/workflow/y", None, "/workflow/y", "y", "y"),
        ("d:.", None, "/workflow", ".", "."),
        ("d:~", None, "~", None, ".ferry-files/home"),
        ("a:/opt/./b/../c", None, "/opt/c", None, ".ferry-files/abs/opt/c"),
    ],
)
def test_each_destination_has_one_place(
    mapping: str, working_dir: str | None, where: str, in_code: str | None, in_archive: str
) -> None:
    parsed = FileMapping.model_validate(mapping)
    assert destination(parsed, working_dir) == where
    assert code_path(parsed, working_dir) == in_code
    assert archive_path(parsed, working_dir) == in_archive
    placed = placed_at(in_archive)
    if in_code is not None:
        assert placed == Placed(in_code=in_code, under_files=None, destination=None)
    else:
        assert placed.destination == where and placed.in_code is None
        assert placed.under_files == in_archive.removeprefix(".ferry-files/")


def test_the_local_path_is_the_destination_when_none_is_given() -> None:
    assert FileMapping.model_validate("~/.cache/huggingface/token").path == "~/.cache/huggingface/token"


@pytest.mark.parametrize(
    ("mapping", "said"),
    [
        ("x:~other/a", "only the job's own home"),
        ("x:~/../a", "goes up (`..`) out of the home"),
        ("x:/", "cannot replace the root directory"),
        ("x:/..", "cannot replace the root directory"),
        ("a:b:c", "expected LOCAL or LOCAL:PATH"),
    ],
)
def test_what_no_rule_places_is_refused_in_one_line(mapping: str, said: str) -> None:
    with pytest.raises(ValidationError, match=said.replace("(", r"\(").replace(")", r"\)")):
        FileMapping.model_validate(mapping)


def test_a_destination_that_resolves_to_the_root_or_ferrys_own_is_refused() -> None:
    assert [r.reason for r in refusals(run(files=["x:../.."]))] == [
        "../.. is the root directory: name a path under it"
    ]
    assert [r.path for r in refusals(run(files=["x:.ferry-files/y"]))] == [("files", "0")]


def test_files_leave_the_warning_line_in_every_form() -> None:
    conf = run(files=[".:examples", "~/.ssh/id_rsa:/root/.ssh/id_rsa", "../examples", "~/.ssh/id_rsa"])
    assert conf.unsupported_fields() == []
    assert refusals(conf) == []


def test_docker_true_is_refused_in_one_line_and_false_asks_nothing() -> None:
    refused = refusals(run(docker=True))
    assert [(r.path, r.reason) for r in refused] == [(("docker",), DOCKER_REFUSED)]
    assert "docker" not in run(docker=True).unsupported_fields()
    assert refusals(run(docker=False)) == [] and run(docker=False).unsupported_fields() == []


def test_the_manifest_names_paths_only_and_reads_back() -> None:
    names = ["train.py", ".ferry-files/abs/root/.ssh/id_rsa", ".ferry-files/home/configs"]
    assert read_manifest(manifest(names).decode()) == [placed_at(name) for name in names]
    for bad in ["../x", "/etc/passwd", ".ferry-files/other/x", ".ferry-files/abs", "a/../../b"]:
        with pytest.raises(ValueError):
            placed_at(bad)


def test_the_container_code_dir_is_the_agents() -> None:
    assert CONTAINER_CODE_DIR == WORKFLOW_DIR


@pytest.mark.parametrize(
    ("user", "env", "home"),
    [
        (None, {}, "/root"),
        ("root", {}, "/root"),
        ("0:0", {"HOME": "/ignored"}, "/root"),
        ("app", {"HOME": "/home/app"}, "/home/app"),
        ("1000", {}, None),  # the image does not say: a `~` destination fails the job, naming it
    ],
)
def test_a_containers_home_is_roots_or_the_images(
    user: str | None, env: dict[str, str], home: str | None
) -> None:
    assert container_home(user, env) == home


def test_a_host_process_finds_its_files_under_its_task_a_container_at_their_paths(tmp_path: Path) -> None:
    """The rule for a host process: an absolute destination is never written on the host, a `~` one never
    in the agent's home; both are under the task's own `files/` (FERRY_FILE_<n> says where)."""
    paths = TaskPaths(tmp_path / "task")
    placed = [
        placed_at(name) for name in ["in/a.txt", ".ferry-files/abs/root/.ssh/id_rsa", ".ferry-files/home/c"]
    ]
    assert host_paths(paths, placed) == [
        str(tmp_path / "task" / "workdir" / "in" / "a.txt"),
        str(tmp_path / "task" / "files" / "abs" / "root" / ".ssh" / "id_rsa"),
        str(tmp_path / "task" / "files" / "home" / "c"),
    ]
    assert [container_path(entry, WORKFLOW_DIR, "/root") for entry in placed] == [
        "/workflow/in/a.txt",
        "/root/.ssh/id_rsa",
        "/root/c",
    ]
    files = tmp_path / "task" / "files"
    assert container_binds(paths, placed, "/home/u") == [
        f"{files}/home/c:/home/u/c:rw",
        f"{files}/abs/root/.ssh/id_rsa:/root/.ssh/id_rsa:rw",
    ]
    with pytest.raises(ValueError, match="the image names no HOME"):
        container_binds(paths, placed, None)
