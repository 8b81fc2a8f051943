"""dstack's `repos` in every documented form (docs/runs.md#repos): how each is parsed, which one is the job's
code, which are placed as `files` are, which the agent clones and where, `single_branch`'s default, the
names of a private repo's credentials, and the archive's manifest of the local ones."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from activities.code import code_sources, pack_repo
from core.configuration import TaskConfiguration, parse_configuration
from core.configuration.base import BaseRunConfiguration
from core.configuration.code_sources import (
    RepoSpec,
    cloned_repos,
    code_is_empty,
    code_repo,
    placed_repos,
    single_branch,
)
from core.configuration.runnable import refusals
from core.files_manifest import Placed, manifest, read_manifest
from core.repo_credentials import repo_key, ssh_key_secret, token_secret, without_password
from core.run_types import configurator_for


def run(kind: str = "task", **fields: object) -> BaseRunConfiguration:
    extra: dict[str, object] = {"commands": ["true"]} if kind != "dev-environment" else {"ide": "vscode"}
    conf = parse_configuration({"type": kind, **extra, **fields})
    assert isinstance(conf, BaseRunConfiguration)
    return conf


@pytest.mark.parametrize(
    ("form", "local", "url", "path"),
    [
        (".", ".", None, "."),
        ("..:/my-repo", "..", None, "/my-repo"),
        ("https://github.com/org/repo", None, "https://github.com/org/repo", "."),
        ("https://github.com/org/repo:~/repo", None, "https://github.com/org/repo", "~/repo"),
        ("git://127.0.0.1:9418/r.git:lib", None, "git://127.0.0.1:9418/r.git", "lib"),
        ("git@github.com:org/repo.git", None, "git@github.com:org/repo.git", "."),
        ("git@github.com:org/repo.git:/opt/r", None, "git@github.com:org/repo.git", "/opt/r"),
        ({"url": "https://h/r", "path": "x", "branch": "dev"}, None, "https://h/r", "x"),
        ({"local_path": "~/src/lib", "path": "lib"}, "~/src/lib", None, "lib"),
    ],
)
def test_every_form_parses(form: object, local: str | None, url: str | None, path: str) -> None:
    repo = run(repos=[form]).repos[0]
    assert (repo.local_path, repo.url, repo.path) == (local, url, path)


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"url": "https://h/r", "local_path": "."}, "either `local_path` or `url`"),
        ({"url": "https://h/r", "hash": "main"}, "is not a commit hash"),
        ({"url": "https://h/r", "branch": "--upload-pack=x"}, "cannot start with `-`"),
        ({"url": "https://h/r", "path": "~bob/r"}, "only the job's own home"),
        ({"url": "https://h/r", "path": "/"}, "cannot replace the root directory"),
        ("a:b:c", "expected PATH, URL, PATH:DEST or URL:DEST"),
    ],
)
def test_what_cannot_be_placed_is_refused(form: object, error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        run(repos=[form])


def test_a_repo_where_no_rule_places_it_is_refused_before_submission() -> None:
    conf = run(repos=["https://h/r:.ferry-files/x", "..:../..", "https://h/s:ok"])
    assert isinstance(conf, TaskConfiguration)
    assert [(r.path, r.reason) for r in refusals(conf)] == [
        (("repos", "0"), ".ferry-files/x: .ferry-files is Ferry's own (docs/runs.md#files)"),
        (("repos", "1"), "../.. is the root directory: name a path under it"),
    ]


def test_which_repo_is_the_code_which_are_placed_and_which_cloned() -> None:
    repos = [
        RepoSpec.model_validate(form) for form in ["https://h/a", "..:lib", ".", "../b", "https://h/c:x"]
    ]
    assert code_repo(repos) == 2  # the first local repo at the working directory
    assert [i for i, _ in placed_repos(repos)] == [1, 3]  # a second one at `.` is placed over the code
    assert [i for i, _ in cloned_repos(repos)] == [0, 4]
    assert not code_is_empty(repos)
    assert code_is_empty([RepoSpec.model_validate("https://h/a")])  # the clone is the code
    assert not code_is_empty([RepoSpec.model_validate("https://h/a:lib")])  # the configuration's dir is


def test_repos_and_single_branch_leave_the_warning_line() -> None:
    conf = run(repos=["..:/x", "https://h/r", {"url": "https://h/s", "path": "~/s"}], single_branch=False)
    assert conf.unsupported_fields() == []


@pytest.mark.parametrize(
    ("kind", "configured", "expected"),
    [("task", None, True), ("service", None, True), ("dev-environment", None, False), ("task", False, False)],
)
def test_single_branch_defaults_as_dstacks(kind: str, configured: bool | None, expected: bool) -> None:
    assert single_branch(configured, kind) is expected
    fields: dict[str, object] = {} if configured is None else {"single_branch": configured}
    if kind == "service":
        fields["port"] = 80
    spec = configurator_for(run(kind, repos=["https://h/r"], **fields)).job_spec(  # type: ignore[arg-type]
        run_name="r", replica_num=0, job_num=0
    )
    assert spec.repos[0].single_branch is expected


@pytest.mark.parametrize(
    ("path", "working_dir", "place"),
    [
        (".", None, "."),
        ("lib", "src", "src/lib"),
        ("/opt/r", None, ".ferry-files/abs/opt/r"),
        ("/workflow/r", None, "r"),
        ("~/r", None, ".ferry-files/home/r"),
        ("r", "/abs", ".ferry-files/abs/abs/r"),
    ],
)
def test_a_clone_goes_where_a_files_mapping_of_the_same_path_would(
    path: str, working_dir: str | None, place: str
) -> None:
    repo = {"url": "https://h/r", "path": path, "branch": "dev", "hash": "abc1234", "if_exists": "skip"}
    conf = run(repos=[repo], **({"working_dir": working_dir} if working_dir else {}))
    (clone,) = configurator_for(conf).job_spec(run_name="r", replica_num=0, job_num=0).repos  # type: ignore[arg-type]
    assert (clone.place, clone.branch, clone.hash, clone.if_exists) == (place, "dev", "abc1234", "skip")
    assert clone.token is None and clone.ssh_key is None  # filled in by START_JOB only


def test_local_repos_go_in_the_archive_as_files_do(tmp_path: Path) -> None:
    project, lib = tmp_path / "project", tmp_path / "lib"
    for directory in (project, lib):
        directory.mkdir()
    (project / "run.yml").write_text("x")
    (lib / "m.py").write_text("m")
    (lib / ".gitignore").write_text("*.log\n")
    (lib / "big.log").write_text("ignored")
    conf = run(repos=["../lib:vendor/lib", "../lib:~/lib"], files=["run.yml:/etc/run.yml"])
    sources = code_sources(project, conf.repos, conf.files, None)
    assert sources.root == project and sources.name.startswith("project-")
    assert [target for _, target in sources.repos] == ["vendor/lib", ".ferry-files/home/lib"]
    with tarfile.open(fileobj=io.BytesIO(pack_repo(*sources[:3])), mode="r:gz") as tar:
        names = set(tar.getnames())
    assert {
        "run.yml",
        "vendor/lib/m.py",
        ".ferry-files/home/lib/m.py",
        ".ferry-files/abs/etc/run.yml",
    } <= names
    assert not any(name.endswith("big.log") for name in names)  # its .gitignore honoured
    listed = manifest([target for _, target in sources.extra], [target for _, target in sources.repos])
    assert read_manifest(listed.decode()) == [Placed(None, "abs/etc/run.yml", "/etc/run.yml")]
    assert read_manifest(listed.decode(), "repos")[1] == Placed(None, "home/lib", "~/lib")
    assert read_manifest(manifest(["a"]).decode(), "repos") == []


def test_a_clone_at_the_working_dir_sends_no_configuration_directory(tmp_path: Path) -> None:
    conf = run(repos=["https://github.com/org/My.Repo.git"])
    sources = code_sources(tmp_path, conf.repos, conf.files, None)
    assert sources.root is None and sources.name.startswith("my-repo-")
    assert pack_repo(sources.root) == pack_repo(None)


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/org/repo",
        "https://GitHub.com/org/repo.git",
        "https://user:pw@github.com/org/repo/",
    ],
)
def test_a_repos_credentials_are_named_by_its_url(url: str) -> None:
    assert repo_key(url) == "https://github.com/org/repo"
    assert token_secret(url) == token_secret("https://github.com/org/repo")
    assert token_secret(url).startswith("GIT_TOKEN_") and ssh_key_secret(url).startswith("GIT_SSH_KEY_")
    assert repo_key("git@github.com:org/repo.git") == "ssh://github.com/org/repo"
    assert token_secret("https://github.com/org/other") != token_secret(url)


def test_a_url_is_shown_without_its_password() -> None:
    assert without_password("https://u:tok123@h/r") == "https://u:***@h/r"
    assert without_password("https://h/r") == "https://h/r"
    assert without_password("git@h:r") == "git@h:r"
