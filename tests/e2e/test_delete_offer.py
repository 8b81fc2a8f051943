"""`ferry delete` and `ferry offer`, end to end on the embedded stack. Delete: a finished run's records,
logs and Temporal workflows go; an older run of the same name, and an active run, stay. Offer: the local
instance fits now, once a run holding all its CPUs ends, or never, as its scheduler sees it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Ferry, last_line, task

TEMPORAL = str(Path(sys.executable).parent / "temporal")


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("configs")


def workflow_ids(ferry: Ferry, query: str) -> list[str]:
    """The Temporal executions the query finds, as the Temporal CLI lists them (no decoding needed)."""
    port = json.loads((ferry.home / "stack" / "stack.json").read_text())["port"]
    listed = subprocess.run(
        [TEMPORAL, "workflow", "list", "--address", f"127.0.0.1:{port}", "--query", query, "-o", "json"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return sorted(execution["execution"]["workflowId"] for execution in json.loads(listed.stdout or "[]"))


def listed_soon(ferry: Ferry, query: str, expected: list[str]) -> bool:
    """Whether Temporal's visibility lists `expected` within seconds: Temporal deletes in the background."""
    deadline = time.monotonic() + 120
    while workflow_ids(ferry, query) != expected:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def run_ids(ferry: Ferry, name: str) -> list[str]:
    runs = json.loads(ferry("ps", "-a", "--json").stdout)
    return [run["id"] for run in runs if run["name"] == name]


def test_a_finished_run_goes_and_an_older_one_of_its_name_stays(ferry: Ferry, configs: Path) -> None:
    conf = task(configs, "twice", "echo one of two", extra="nodes: 2\n")
    assert ferry("apply", "-y", "-f", conf).returncode == 0
    [older] = run_ids(ferry, "twice")
    assert ferry("apply", "-y", "-f", conf).returncode == 0
    [newer] = set(run_ids(ferry, "twice")) - {older}
    jobs = "WorkflowId STARTS_WITH 'ferry/main/twice/r'"  # the job workflows of every run of the name
    assert len(workflow_ids(ferry, jobs)) == 4

    deleted = ferry("delete", "-y", "twice")

    assert deleted.returncode == 0, deleted.stderr
    assert (
        last_line(deleted.stderr) == "run twice deleted: 2 job(s); 3 workflow execution(s) leaving Temporal"
    )
    assert run_ids(ferry, "twice") == [older]
    assert listed_soon(ferry, jobs, ["ferry/main/twice/r0/j0/s0", "ferry/main/twice/r0/j1/s0"])
    assert listed_soon(ferry, "WorkflowId = 'ferry/main/twice'", ["ferry/main/twice"])  # the older's
    assert ferry("logs", "twice").stdout == "[job 0] one of two\n[job 1] one of two\n"  # the older's
    assert ferry("delete", "-y", "twice").returncode == 0
    assert run_ids(ferry, "twice") == []
    assert listed_soon(ferry, "WorkflowId STARTS_WITH 'ferry/main/twice'", [])
    gone = ferry("logs", "twice")
    assert gone.returncode != 0 and "no run named 'twice'" in last_line(gone.stderr)


def test_an_active_run_is_refused_and_keeps_running(ferry: Ferry, configs: Path) -> None:
    conf = task(configs, "busy", "sleep 600")
    assert ferry("apply", "-y", "-d", "-f", conf).returncode == 0
    refused = ferry("delete", "-y", "busy")
    assert refused.returncode == 2  # refused (docs/cli.md#exit-codes)
    assert last_line(refused.stderr).startswith("ferry delete: run busy is ")
    assert last_line(refused.stderr).endswith(": stop it first (ferry stop busy)")
    assert len(run_ids(ferry, "busy")) == 1
    assert ferry("metrics", "busy").returncode == 0  # a sample's workflow, named after the run's
    assert ferry("stop", "-y", "-x", "busy").returncode == 0
    assert ferry("delete", "-y", "busy").returncode == 0
    assert listed_soon(ferry, "WorkflowId STARTS_WITH 'ferry/main/busy'", [])


def test_an_unknown_run_is_one_line(ferry: Ferry) -> None:
    result = ferry("delete", "-y", "never-was")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "ferry delete: no run named 'never-was' in project 'main' (see ferry ps -a)"
    ]


def local_cpus(ferry: Ferry) -> float:
    [local] = [
        fleet for fleet in json.loads(ferry("fleet", "list", "--json").stdout) if fleet["name"] == "local"
    ]
    return float(local["instances"][0]["total"]["cpu"])


def test_offer_now_when_free_and_never(ferry: Ferry, configs: Path) -> None:
    small = task(configs, "small", "true", extra="nodes: 2\n")
    now = ferry("offer", "-f", small)
    assert now.returncode == 0, now.stderr
    assert now.stdout.splitlines() == ["INSTANCE  STATUS  FITS  NODES", "local     ready   now   all"]
    assert last_line(now.stderr) == "fleet local: a run submitted now would be placed at once"

    huge = configs / "huge.yml"
    huge.write_text("type: task\nname: huge\ncommands: ['true']\nresources: {cpu: 4096}\n")
    never = ferry("offer", "-f", str(huge), "--json")
    assert never.returncode == 2
    answer = json.loads(never.stdout)
    assert answer["instances"][0]["fit"] == "never"
    described = answer["instances"][0]["described"]  # as this machine's agent describes it
    assert described.startswith("cpu=") and ", agent " in described
    assert answer["instances"][0]["reasons"][0].startswith("needs 4096 CPUs, instance has ")
    assert answer["never"].startswith("no instance of fleet local can run it: local: needs 4096 CPUs")

    cpus = local_cpus(ferry)
    hog = configs / "hog.yml"
    hog.write_text(
        f"type: task\nname: hog\ncommands: [sleep 600]\nresources: {{cpu: {cpus:g}, memory: 0GB..}}\n"
    )
    assert ferry("apply", "-y", "-d", "-f", str(hog)).returncode == 0
    try:
        assert ferry("wait", "hog", "--status", "running", "--timeout", "60s").returncode == 0
        one_cpu = configs / "one.yml"
        one_cpu.write_text("type: task\nname: one\ncommands: ['true']\nresources: {cpu: 1, memory: 0GB..}\n")
        later = ferry("offer", "-f", str(one_cpu))
        assert later.returncode == 0, later.stderr
        lines = later.stdout.splitlines()
        assert lines[1].split() == ["local", "ready", "when", "free", "all"]
        assert lines[2].startswith(f"  why not now: 1 job(s) hold {cpus:g} CPUs")
        assert last_line(later.stderr) == (
            "fleet local: a run submitted now would wait for capacity (see ferry fleet list)"
        )
    finally:
        ferry("stop", "-y", "-x", "hog")
