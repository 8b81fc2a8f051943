"""FERRY_HOME is private: the agent's token, ferry.db and temporal.db (every run's env, in clear), the logs.

And `ferry apply -d` exits 0 every time: never the Temporal SDK's teardown abort at exit (exit 134).
"""

from __future__ import annotations

import os
import shutil
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from embedded.processes import NotPrivate, job_code, make_private
from tests.e2e.conftest import Ferry, ferry_env, task

APPLIES = 24  # each a subprocess that opens a Temporal client; ~1% aborted before the fix (sdk-python#300)


def not_private(home: Path) -> list[str]:
    """What under `home` is not a 0700 directory or a 0600 file, with the modes, except the jobs' code."""
    found = []
    for directory, dirs, files in os.walk(home):
        here = Path(directory)
        # The job's code keeps its repository's modes (scripts stay executable); the 0700 task directory
        # above it keeps others out. Nothing else is excepted: there are no sockets or FIFOs under it.
        dirs[:] = [d for d in dirs if not (d == "workdir" and here.parent.name == "tasks")]
        for name in [".", *dirs, *files]:
            path = here / name
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            wanted = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
            if not stat.S_ISDIR(st.st_mode) and not stat.S_ISREG(st.st_mode):
                found.append(f"{path}: neither a file nor a directory")
            elif mode != wanted:
                found.append(f"{path}: {mode:04o}")
    return found


def test_every_file_under_ferry_home_is_private(ferry: Ferry, tmp_path: Path) -> None:
    done = ferry("apply", "-y", "-f", task(tmp_path, "private", "echo secret=$SECRET"), env={"SECRET": "x"})
    assert done.returncode == 0, done.stderr
    assert "readable by others" not in done.stderr  # created private: nothing to fix
    home = ferry.home
    for name in ("ferry.db", "agent/token", "agent/agent.json", "stack/temporal.db", "stack/worker.log"):
        assert (home / name).exists(), name
    assert (home / "stack/temporal.db-wal").exists() and (home / "ferry.db-wal").exists()
    assert not_private(home) == []


def test_apply_detached_exits_0_every_time(ferry: Ferry, tmp_path: Path) -> None:
    path = task(tmp_path, "quick", "true")

    def apply(i: int) -> tuple[int, str]:
        done = ferry("apply", "-y", "-d", "-n", f"quick-{i}", "-f", path)
        return done.returncode, done.stderr

    ferry("server", "start")
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(apply, range(APPLIES)))
    failed = [(code, err.strip().splitlines()[-1:]) for code, err in results if code != 0]
    assert failed == []


def test_a_wide_ferry_home_is_made_private_and_said_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "agent").mkdir(parents=True)
    (home / "stack").mkdir()
    wide = {"agent/token": "t" * 43, "ferry.db": "", "stack/worker.log": "old\n"}
    for name, text in wide.items():
        (home / name).write_text(text)
        (home / name).chmod(0o644)
    for directory in (home, home / "agent", home / "stack"):
        directory.chmod(0o755)
    ferry = Ferry(home, ferry_env(home))
    try:
        started = ferry("server", "start")
        assert started.returncode == 0, started.stderr
        said = [line for line in started.stderr.splitlines() if "readable by others" in line]
        expected = [f"ferry: {home / name} was mode 0644, readable by others: now 0600" for name in wide]
        expected += [
            f"ferry: {home / d} was mode 0755, readable by others: now 0700" for d in ("", "agent", "stack")
        ]
        assert sorted(said) == sorted(expected)
        assert not_private(home) == []
        again = ferry("server", "start")
        assert "readable by others" not in again.stderr  # said once
    finally:
        ferry("server", "stop")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_wide_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ferry.db").write_text("")
    (tmp_path / "ferry.db").chmod(0o644)
    os.chown(tmp_path / "ferry.db", 65534, 65534)
    tmp_path.chmod(0o700)
    with pytest.raises(NotPrivate, match="owned by uid 65534"):
        make_private(tmp_path)


def test_a_directory_removed_while_it_is_walked_is_no_error(tmp_path: Path) -> None:
    """The agent removes a task's directory whenever its task is removed: the walk must not fail on it
    (CI saw `ferry apply` exit 1 with "No such file or directory" on a task directory)."""
    gone = tmp_path / "tasks" / "t-1"
    gone.mkdir(parents=True)
    (tmp_path / "tasks").chmod(0o755)

    def remove_once_listed(path: Path) -> bool:
        if path == gone:
            shutil.rmtree(gone)  # as the agent would, between the listing and the visit
        return False

    [change] = make_private(tmp_path, skip=remove_once_listed)
    assert change.startswith(f"{tmp_path / 'tasks'} was mode 0755") and not gone.exists()


def test_the_jobs_code_and_the_named_volumes_are_left_as_the_jobs_made_them(tmp_path: Path) -> None:
    """docs/volumes.md: a volume holds a job's files, in modes (and owners) of the job's choosing."""
    data = tmp_path / "agent" / "data"
    kept = [data / "tasks" / "t-1" / "workdir" / "run.sh", data / "volumes" / "main" / "shared" / "out.txt"]
    for path in kept:
        path.parent.mkdir(parents=True)
        path.write_text("x")
        path.chmod(0o755)
    narrowed = data / "tasks" / "t-1" / "spec.json"
    narrowed.write_text("{}")
    narrowed.chmod(0o644)
    changes = make_private(tmp_path, skip=job_code)
    assert any(change.startswith(f"{narrowed} was mode 0644") for change in changes)
    assert [path.stat().st_mode & 0o777 for path in kept] == [0o755, 0o755]
    changed = [Path(change.split(" was mode ")[0]) for change in changes]
    skipped = (data / "volumes", data / "tasks" / "t-1" / "workdir")
    assert not [path for path in changed if any(path.is_relative_to(top) for top in skipped)]
