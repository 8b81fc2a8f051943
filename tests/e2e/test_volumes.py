"""Volumes end to end on the embedded stack (docs/volumes.md): a named volume used by two runs one after
another and refused to a second job while one holds it; instance volumes, `~` among them, seen by the
job and kept after it.

The jobs run as host processes: the agent links each volume at its mount path (agent/volumes.py), so the
mount paths here are under the test's own directory. HOME is the test's too, for `~`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Ferry, ferry_env, last_line, stack_of, task


@pytest.fixture(scope="module")
def ferry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ferry]:
    """One FERRY_HOME and one HOME (the user's home, `~` on the local instance) for this module."""
    home = tmp_path_factory.mktemp("ferry-home")
    env = {**ferry_env(home), "HOME": str(tmp_path_factory.mktemp("user-home"))}
    with stack_of(Ferry(home, env)) as runner:
        yield runner


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("volumes")


def volumes(*mounts: str | dict[str, str]) -> str:
    return "volumes:\n" + "".join(f"  - {json.dumps(mount)}\n" for mount in mounts)


def attached_to(ferry: Ferry, name: str) -> str | None:
    listed = ferry("volume", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [found] = [v for v in json.loads(listed.stdout) if v["name"] == name]
    return found["attached_to"]


def test_a_named_volume_keeps_a_file_from_one_run_to_the_next(ferry: Ferry, work: Path) -> None:
    created = ferry("volume", "create", "shared")
    assert (created.returncode, created.stderr) == (
        0,
        "volume shared created (fleet local, instance local)\n",
    )
    mount = work / "mnt" / "shared"
    writer = task(
        work, "writer", f"echo written by the first run > {mount}/note", extra=volumes(f"shared:{mount}")
    )
    first = ferry("apply", "-y", "-f", writer)
    assert first.returncode == 0, first.stderr
    reader = task(work, "reader", f"cat {mount}/note", extra=volumes(f"shared:{mount}"))
    second = ferry("apply", "-y", "-f", reader)
    assert (second.returncode, second.stdout) == (0, "written by the first run\n"), second.stderr
    # The volume's directory is the local agent's, under FERRY_HOME; both jobs have detached it.
    on_instance = ferry.home / "agent" / "data" / "volumes" / "main" / "shared" / "note"
    assert on_instance.read_text() == "written by the first run\n"
    assert attached_to(ferry, "shared") is None


def test_a_second_job_naming_a_volume_in_use_fails_with_its_name(ferry: Ferry, work: Path) -> None:
    assert ferry("volume", "create", "busy").returncode == 0
    mount, release = work / "mnt" / "busy", work / "release-holder"
    holder = task(
        work,
        "holder",
        f"while [ ! -e {release} ]; do sleep 0.1; done",
        "echo held",
        extra=volumes(f"busy:{mount}"),
    )
    assert ferry("apply", "-y", "-d", "-f", holder).returncode == 0
    running = ferry("wait", "holder", "--status", "running", "--timeout", "60s")
    assert running.returncode == 0, running.stderr
    held_by = attached_to(ferry, "busy")
    assert held_by is not None and held_by.startswith("holder-")

    intruder = task(work, "intruder", "echo never", extra=volumes(f"busy:{work / 'mnt' / 'other'}"))
    refused = ferry("apply", "-y", "-f", intruder)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert last_line(refused.stderr) == (
        f"run intruder: failed (job failed): volume error: volume busy is attached to job {held_by}"
    )
    deleting = ferry("volume", "delete", "-y", "busy")
    assert deleting.returncode == 2 and f"attached to job {held_by}" in deleting.stderr

    release.touch()
    done = ferry("wait", "holder", "--timeout", "60s")
    assert done.returncode == 0, done.stderr
    assert ferry("logs", "holder").stdout == "held\n"
    assert attached_to(ferry, "busy") is None  # detached before the job ended
    assert ferry("volume", "delete", "-y", "busy").returncode == 0


def test_instance_volumes_are_seen_by_the_job_and_kept_after_it(ferry: Ferry, work: Path) -> None:
    host_dir = work / "datasets"
    host_dir.mkdir()
    (host_dir / "seed.txt").write_text("from the host\n")
    data, cache = work / "mnt" / "data", work / "mnt" / "cache"
    conf = task(
        work,
        "instance-volumes",
        f"cat {data}/seed.txt",
        f"echo made by the job > {data}/made.txt",
        f"echo cached > {cache}/hit.txt",
        extra=volumes(f"{host_dir}:{data}", {"instance_path": "~/ferry-cache", "path": str(cache)}),
    )
    result = ferry("apply", "-y", "-f", conf)
    assert (result.returncode, result.stdout) == (0, "from the host\n"), result.stderr
    assert (host_dir / "made.txt").read_text() == "made by the job\n"
    user_home = Path(ferry.env["HOME"])
    assert (user_home / "ferry-cache" / "hit.txt").read_text() == "cached\n"  # `~`: the agent's user's home


def test_a_job_naming_a_volume_that_does_not_exist_fails_before_it_starts(ferry: Ferry, work: Path) -> None:
    marker = work / "started"
    conf = task(work, "orphan", f"touch {marker}", extra=volumes(f"nope:{work / 'mnt' / 'nope'}"))
    result = ferry("apply", "-y", "-f", conf)
    assert result.returncode == 1
    assert last_line(result.stderr) == (
        "run orphan: failed (job failed): volume error: "
        "volume nope does not exist in project 'main' (see ferry volume list)"
    )
    assert not marker.exists()
