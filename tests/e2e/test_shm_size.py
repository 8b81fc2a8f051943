"""`resources.shm_size` and `privileged` on the host end to end on the embedded stack, the placement
requirements a host job has (docs/containers.md#resourcesshm_size, docs/containers.md#privileged): the local
agent reports this machine's /dev/shm, and a host run asking for more is refused at once with the sizes in
the reason, never placed; one asking for less runs. The agent reports the user it runs as, this test's: as
root (as in CI) a host run with `privileged: true` runs there, as root; as another user `ferry offer` says
it never fits, naming the user."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from core.configuration.ranges import format_measured_memory
from tests.e2e.conftest import Ferry

HAS = format_measured_memory(shutil.disk_usage("/dev/shm").total / 2**30)
REASON = f"needs 4TB of /dev/shm on the host, instance has {HAS}"


def test_a_host_run_asking_for_more_dev_shm_than_the_host_has_is_refused(
    ferry: Ferry, tmp_path: Path
) -> None:
    conf = tmp_path / "big-shm.yml"
    conf.write_text(
        "type: task\nname: big-shm\ncommands: ['true']\nresources: {memory: 0GB.., shm_size: 4TB}\n"
    )
    offered = ferry("offer", "-f", str(conf), "--json")
    assert offered.returncode == 2, offered.stderr
    [local] = json.loads(offered.stdout)["instances"]
    assert (local["fit"], local["reasons"]) == ("never", [REASON])

    applied = ferry("apply", "-y", "-f", str(conf), timeout=120)
    assert applied.returncode != 0
    [run] = [r for r in json.loads(ferry("ps", "-a", "--json").stdout) if r["name"] == "big-shm"]
    [job] = run["jobs"]
    assert job["termination_reason"] == "failed_to_start_due_to_no_capacity", job
    assert job["termination_message"] == f"no instance of fleet local can run it: local: {REASON}"
    assert job["instance"] is None  # never placed

    small = tmp_path / "small-shm.yml"
    small.write_text(
        "type: task\nname: small-shm\ncommands: ['true']\nresources: {memory: 0GB.., shm_size: 1MB}\n"
    )
    assert ferry("apply", "-y", "-f", str(small), timeout=120).returncode == 0


PRIVILEGED = (
    "type: task\nname: privileged-host\ncommands: ['test \"$(id -u)\" = 0']\nprivileged: true\n"
    "resources: {cpu: 0.., memory: 0GB.., disk: 0GB..}\n"
)


@pytest.mark.skipif(os.geteuid() != 0, reason="the local agent runs as this user, not root: the next test")
def test_a_privileged_host_run_runs_where_the_agent_is_root(ferry: Ferry, tmp_path: Path) -> None:
    conf = tmp_path / "privileged.yml"
    conf.write_text(PRIVILEGED)
    offered = ferry("offer", "-f", str(conf), "--json")
    assert offered.returncode == 0, offered.stderr
    [local] = json.loads(offered.stdout)["instances"]
    assert local["fit"] != "never", local
    applied = ferry("apply", "-y", "-f", str(conf), timeout=120)
    assert applied.returncode == 0, applied.stdout + applied.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="the local agent runs as root: the run above runs")
def test_a_privileged_host_run_never_fits_where_the_agent_is_not_root(ferry: Ferry, tmp_path: Path) -> None:
    conf = tmp_path / "privileged.yml"
    conf.write_text(PRIVILEGED)
    offered = ferry("offer", "-f", str(conf), "--json")
    assert offered.returncode == 2, offered.stderr
    [local] = json.loads(offered.stdout)["instances"]
    reason = (
        "privileged: true runs on the host only where the agent runs as root; "
        f"instance's agent runs as uid {os.geteuid()}"
    )
    assert (local["fit"], local["reasons"]) == ("never", [reason])
