"""`ferry metrics RUN` end to end on the embedded stack (docs/jobs.md#metrics): a running task's row, its
JSON, a watch that ends with its run, and the exit codes of an unknown and a finished run."""

from __future__ import annotations

import json
from pathlib import Path

from cli import exit_codes
from cli.metrics import JobSample, metrics_table
from core.wire.agent_api import GpuUse, TaskMetrics
from store import JobSubmissionRecord
from tests.e2e.conftest import Ferry, last_line, task

HEADER = ["REPLICA", "JOB", "INSTANCE", "STATUS", "CPU", "MEMORY", "GPU"]
MIB, GIB = 2**20, 2**30
WATCHED_SAMPLES = 30  # -w samples every 2 s: a minute for the job to show its CPU busy


def test_metrics_of_a_running_task(ferry: Ferry, tmp_path: Path) -> None:
    conf = task(tmp_path, "hot", "python3 -c 'while True: pass'")
    assert ferry("apply", "-y", "-d", "-f", conf).returncode == 0
    try:
        running = ferry("wait", "hot", "--status", "running", "--timeout", "60s")
        assert running.returncode == 0, running.stderr

        shown = ferry("metrics", "hot")
        assert shown.returncode == 0, shown.stderr
        header, *rows = shown.stdout.splitlines()
        assert header.split() == HEADER
        [row] = [line.split() for line in rows]  # one job, one row
        assert row[:4] == ["0", "0", "local", "running"]
        assert row[4].endswith("%")
        used, limit = row[5].split("/")
        assert used.endswith("MB") and limit.endswith(("MB", "GB"))
        assert row[6] == "-"  # no GPU

        # -w --json: a sample per line until the run ends, then its end on stderr and exit 0.
        watch = ferry.popen("metrics", "hot", "-w", "--json")
        assert watch.stdout is not None
        samples = []
        for _ in range(WATCHED_SAMPLES):
            samples.append(json.loads(watch.stdout.readline()))
            if samples[-1]["jobs"][0]["metrics"]["cpu_percent"] > 30:
                break
        sample = samples[-1]
        assert (sample["run"], sample["status"]) == ("hot", "running")
        [job] = sample["jobs"]
        assert (job["replica"], job["job"], job["instance"], job["status"]) == (0, 0, "local", "running")
        assert job["unavailable"] is None
        metrics = job["metrics"]
        assert metrics["cpu_percent"] > 30, samples  # it burns a core
        assert metrics["task_id"] == job["id"] and metrics["source"] == "processes"
        assert metrics["memory_used_bytes"] > 0 and metrics["gpus"] == []
        assert ferry("stop", "-y", "-x", "hot").returncode == 0
        _, err = watch.communicate(timeout=60)
        assert watch.returncode == 0, err
        assert last_line(err) == "run hot has finished (terminated)"
    finally:
        ferry("stop", "-y", "-x", "hot")


def test_a_finished_run_has_no_live_metrics(ferry: Ferry, tmp_path: Path) -> None:
    assert ferry("apply", "-y", "-f", task(tmp_path, "quick", "true")).returncode == 0
    ended = ferry("metrics", "quick")
    assert ended.returncode == exit_codes.USAGE
    assert ended.stdout == ""
    assert ended.stderr == "ferry metrics: run quick has finished (done): it has no live metrics\n"


def test_an_unknown_run_is_not_found(ferry: Ferry) -> None:
    unknown = ferry("metrics", "no-such-run")
    assert unknown.returncode == exit_codes.NOT_FOUND
    assert unknown.stderr.startswith("ferry metrics: no run named 'no-such-run'")
    assert len(unknown.stderr.splitlines()) == 1


def test_each_gpu_of_a_job_is_shown_with_its_figures() -> None:
    # No GPU here: the table of what an agent on a GPU host answers (agent/gpus.py parses nvidia-smi).
    job = JobSubmissionRecord(id="r-r0-j0-s0", run_id="r", status="running", instance_name="gpu-host")
    gpus = [
        GpuUse(index=2, utilization_percent=87, memory_used_bytes=61234 * MIB, memory_total_bytes=80 * GIB),
        GpuUse(index=3, utilization_percent=None, memory_used_bytes=None, memory_total_bytes=None),
    ]
    figures = TaskMetrics(
        task_id=job.id,
        timestamp=0,
        source="container",
        cpu_percent=250.4,
        window_seconds=2,
        cpus=4,
        memory_used_bytes=3 * GIB,
        memory_limit_bytes=16 * GIB,
        gpus=gpus,
    )
    lost = JobSubmissionRecord(id="r-r0-j1-s0", run_id="r", job_num=1, status="running", instance_name="h2")
    table = metrics_table([JobSample(job, figures), JobSample(lost, unavailable="agent at h2 unreachable")])
    assert table.lines() == [
        "REPLICA  JOB  INSTANCE  STATUS   CPU   MEMORY        GPU",
        "0        0    gpu-host  running  250%  3.0GB/16.0GB  gpu2 87% 59.8GB/80.0GB, gpu3 - -/-",
        "0        1    h2        running  -     -             -",
        "  no metrics: agent at h2 unreachable",
    ]
