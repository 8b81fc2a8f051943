"""Packing a repo directory: .gitignore honoured, and the same files give the same archive."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from activities import code
from activities.code import pack_repo, repo_files
from core.configuration import TaskConfiguration, parse_configuration
from core.configuration.code_sources import FileMapping


def _make_repo(root: Path) -> None:
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text("print('train')\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    (root / ".gitignore").write_text("*.ckpt\nbuild/\n!keep.ckpt\n")
    (root / "model.ckpt").write_text("big")
    (root / "keep.ckpt").write_text("small")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("obj")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")


def test_gitignore_is_honoured(tmp_path: Path) -> None:
    _make_repo(tmp_path)
    names = [p.as_posix() for p in repo_files(tmp_path)]
    assert names == [".gitignore", "keep.ckpt", "run.sh", "src/train.py"]


def test_archive_holds_the_files_with_their_modes(tmp_path: Path) -> None:
    _make_repo(tmp_path)
    with tarfile.open(fileobj=io.BytesIO(pack_repo(tmp_path)), mode="r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {".gitignore", "keep.ckpt", "run.sh", "src/train.py"}
        assert members["run.sh"].mode == 0o755 and members["src/train.py"].mode == 0o644
        source = tar.extractfile(members["src/train.py"])
        assert source is not None and source.read() == b"print('train')\n"


def test_same_files_same_bytes(tmp_path: Path) -> None:
    _make_repo(tmp_path / "a")
    first = pack_repo(tmp_path / "a")
    os.utime(tmp_path / "a" / "src" / "train.py", (1e9, 1e9))  # another mtime alone changes nothing
    assert pack_repo(tmp_path / "a") == first
    (tmp_path / "a" / "src" / "train.py").write_text("print('changed')\n")
    assert pack_repo(tmp_path / "a") != first


def test_a_directory_too_big_for_a_run_is_refused_and_gitignore_narrows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(code, "MAX_FILES", 3)
    for n in range(5):
        (tmp_path / f"data-{n}.bin").write_bytes(b"x")
    (tmp_path / "run.yml").write_text("type: task\n")
    with pytest.raises(code.RepoTooLarge, match=r"is too big to send with the run \(over 3 files"):
        repo_files(tmp_path)
    (tmp_path / ".gitignore").write_text("data-*\n")
    assert [p.as_posix() for p in repo_files(tmp_path)] == [".gitignore", "run.yml"]
    monkeypatch.setattr(code, "MAX_BYTES", 10)
    (tmp_path / "big.txt").write_bytes(b"y" * 11)
    with pytest.raises(code.RepoTooLarge, match="MiB"):
        repo_files(tmp_path)


def _names(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        return {m.name: (tar.extractfile(m) or io.BytesIO()).read() for m in tar.getmembers()}


def test_repos_and_files_choose_and_extend_the_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dstack's `repos: [..]` sends that directory instead; `files` adds to it at paths relative to the
    working dir, and beside it, for the agent to place, those at an absolute or home path
    (docs/runs.md#files): every one is acted on, so none is warned."""
    project = tmp_path / "project"
    _make_repo(project)
    config_dir = project / "configs"
    config_dir.mkdir()
    (tmp_path / "token").write_text("hf")
    (config_dir / "extra").mkdir()
    (config_dir / "extra" / "a.txt").write_text("a")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("key")
    monkeypatch.setenv("HOME", str(home))  # `~` is the user's home, expanded on the user's machine
    task = parse_configuration(
        {
            "type": "task",
            "commands": ["x"],
            "working_dir": "src",
            "repos": [".."],
            "files": ["../../token:secrets/token", "extra", "extra:/abs/extra", "~/.ssh/id_rsa"],
        }
    )
    assert isinstance(task, TaskConfiguration)
    root, extra, _, _ = code.code_sources(config_dir, task.repos, task.files, task.working_dir)
    assert root == project
    assert [(source.name, target) for source, target in extra] == [
        ("token", "src/secrets/token"),
        ("extra", "src/extra"),
        ("extra", ".ferry-files/abs/abs/extra"),
        ("id_rsa", ".ferry-files/home/.ssh/id_rsa"),
    ]
    names = _names(pack_repo(root, extra))
    assert names["src/secrets/token"] == b"hf" and names["src/extra/a.txt"] == b"a"
    assert names[".ferry-files/abs/abs/extra/a.txt"] == b"a"
    assert names[".ferry-files/home/.ssh/id_rsa"] == b"key"
    assert "src/train.py" in names
    assert task.unsupported_fields() == []
    with pytest.raises(code.MissingCodeSource, match="files: nowhere:x: no such file or directory"):
        code.code_sources(config_dir, [], [FileMapping(local_path="nowhere", path="x")], None)


@pytest.mark.parametrize(
    "repos",
    [
        ["."],
        [{"local_path": ".."}],
        ["..:/my-repo"],  # checked out elsewhere than the working dir: placed as `files` are
        ["https://github.com/dstackai/dstack"],  # a clone on the instance
        [".", ".."],
    ],
)
def test_every_form_of_repos_is_acted_on(repos: list[object]) -> None:
    task = parse_configuration({"type": "task", "commands": ["x"], "repos": repos, "single_branch": True})
    assert isinstance(task, TaskConfiguration)
    assert task.unsupported_fields() == []
