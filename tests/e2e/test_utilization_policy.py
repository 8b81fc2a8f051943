"""dstack's `utilization_policy` end to end on the embedded stack (docs/jobs.md#utilization-policy): the
local agent sees one GPU through a fake `nvidia-smi` that answers as the recorded H100 of
tests/agent/test_agent_metrics.py, with the utilization read from a file the test writes. An idle GPU
ends the job with dstack's reason once the window is met, said in the events before; a busy one is left
alone."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import SMALL, Ferry, ferry_env, stack_of

# Its inventory (agent/gpus.py NVIDIA_SMI_QUERY) and its use (GPU_USE_QUERY), as an H100 host answers.
FAKE_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  *utilization.gpu*) echo "0, $(cat {utilization}), 61234, 81559" ;;
  *) echo "0, NVIDIA H100 80GB HBM3, 81559" ;;
esac
"""
POLICY = "utilization_policy: {min_gpu_utilization: 10, time_window: 20s}\n"  # sampled every 5 s
REASON = "terminated_due_to_utilization_policy"


@pytest.fixture(scope="module")
def gpu_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("fake-gpu")
    fake = directory / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI.replace("{utilization}", str(directory / "utilization")))
    fake.chmod(0o755)
    (directory / "utilization").write_text("0\n")
    return directory


@pytest.fixture(scope="module")
def ferry(tmp_path_factory: pytest.TempPathFactory, gpu_dir: Path) -> Iterator[Ferry]:
    """A module's embedded stack whose local agent finds the fake `nvidia-smi` first on its PATH."""
    home = tmp_path_factory.mktemp("ferry-home")
    env = ferry_env(home)
    env["PATH"] = f"{gpu_dir}:{os.environ['PATH']}"
    with stack_of(Ferry(home, env)) as runner:
        yield runner


def gpu_task(directory: Path, name: str) -> str:
    path = directory / f"{name}.yml"
    resources = SMALL.replace("}", ", gpu: 1}")
    path.write_text(f"type: task\nname: {name}\ncommands: ['sleep 600']\n{resources}{POLICY}")
    return str(path)


def job_events(ferry: Ferry, run: str) -> list[dict[str, object]]:
    shown = ferry("events", run, "--job", "0", "--json")
    return [json.loads(line) for line in shown.stdout.splitlines()]


def memos(events: list[dict[str, object]]) -> list[str]:
    return [
        str(context["gpu_utilization"])
        for event in events
        if event["name"] == "memo"
        and isinstance(context := event["context"], dict)
        and "gpu_utilization" in context
    ]


def test_an_idle_gpu_ends_the_job_with_dstack_s_reason(ferry: Ferry, gpu_dir: Path, tmp_path: Path) -> None:
    (gpu_dir / "utilization").write_text("0\n")
    assert ferry("apply", "-y", "-d", "-f", gpu_task(tmp_path, "idle")).returncode == 0
    try:
        ended = ferry("wait", "idle", "--timeout", "120s", timeout=150)
        assert ended.returncode == 0, (ended.stdout, ended.stderr, job_events(ferry, "idle"))
        [run] = [r for r in json.loads(ferry("ps", "-a", "--json").stdout) if r["name"] == "idle"]
        # As for any job ended by its limits, not by its user: the run fails (JOB_FAILED, not retried).
        assert run["status"] == "failed", run
        [job] = run["jobs"]
        assert (job["status"], job["termination_reason"]) == ("terminated", REASON), job
        assert job["termination_message"] == "GPU 0 utilization below 10% for 20s of 20s"
        events = job_events(ferry, "idle")
        said = memos(events)
        assert said and said[0].startswith("GPU 0 utilization below 10% for "), said
        names = [event["name"] for event in events]
        assert names.index("memo", names.index("start")) < names.index("exception")  # said before acting
        assert events[-1]["context"] == {"status": "terminated", "reason": REASON}
    finally:
        ferry("stop", "-y", "-x", "idle")


def test_a_busy_gpu_is_left_alone(ferry: Ferry, gpu_dir: Path, tmp_path: Path) -> None:
    (gpu_dir / "utilization").write_text("87\n")
    assert ferry("apply", "-y", "-d", "-f", gpu_task(tmp_path, "busy")).returncode == 0
    try:
        assert ferry("wait", "busy", "--status", "running", "--timeout", "60s").returncode == 0
        # The window and two samples more (every 5 s): still running, nothing said.
        still = ferry("wait", "busy", "--timeout", "30s", timeout=60)
        assert still.returncode == 1, still.stdout  # timed out: the run did not finish
        assert memos(job_events(ferry, "busy")) == []
        assert ferry("stop", "-y", "busy").returncode == 0
        [run] = [r for r in json.loads(ferry("ps", "-a", "--json").stdout) if r["name"] == "busy"]
        assert run["jobs"][0]["termination_reason"] == "terminated_by_user", run
    finally:
        ferry("stop", "-y", "-x", "busy")
