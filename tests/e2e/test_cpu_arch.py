"""CPU architectures end to end on the embedded stack (docs/fleets.md#placement-and-blocks): the local agent
reports this machine's, `ferry offer` shows it, and a run asking for the other one is refused at once with
the architecture in the reason, never placed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.e2e.conftest import Ferry

MINE = {"x86_64": "x86", "aarch64": "arm", "arm64": "arm"}[os.uname().machine]
OTHER = "arm" if MINE == "x86" else "x86"
WHY = f"no instance of fleet local has an {OTHER} CPU (it is {MINE})"


def test_a_run_asking_for_another_architecture_is_refused_saying_so(ferry: Ferry, tmp_path: Path) -> None:
    conf = tmp_path / "other-arch.yml"
    conf.write_text(
        f"type: task\nname: other-arch\ncommands: ['true']\nresources: {{cpu: '{OTHER}:1', memory: 0GB..}}\n"
    )
    offered = ferry("offer", "-f", str(conf), "--json")
    assert offered.returncode == 2, offered.stderr
    answer = json.loads(offered.stdout)
    [local] = answer["instances"]
    assert local["described"].startswith(f"cpu={MINE}:")  # as this machine's agent reports it
    assert (local["fit"], local["reasons"]) == ("never", [f"needs {OTHER} CPUs, instance has {MINE}"])
    assert answer["never"] == WHY

    applied = ferry("apply", "-y", "-f", str(conf), timeout=120)
    assert applied.returncode != 0
    [run] = [r for r in json.loads(ferry("ps", "-a", "--json").stdout) if r["name"] == "other-arch"]
    assert run["status"] == "failed", run
    [job] = run["jobs"]
    assert job["termination_reason"] == "failed_to_start_due_to_no_capacity", job
    assert job["termination_message"] == WHY
    assert job["instance"] is None  # never placed
