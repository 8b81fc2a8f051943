"""`resources.shm_size` on the host end to end on the embedded stack (docs/containers.md#resourcesshm_size):
the local agent reports this machine's /dev/shm, and a host run asking for more is refused at once with
the sizes in the reason, never placed; one asking for less runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

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
