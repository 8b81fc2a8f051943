"""The skeleton section (bench.run): ../shared/peers/temporal_skeleton.py, the Temporal ceiling, on the
stack's own dev server, and the history events of one trivial run beside the skeleton's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import temporal_counters
from bench.common import Clock, Report
from bench.ferry_side import FerrySide

SKELETON_LATENCY_RUNS = 10  # temporal_skeleton.py times 10 sequential runs before its burst


def measure(ferry: FerrySide, report: Report, peers: Path, runs_asked: int) -> None:
    """../shared/peers/temporal_skeleton.py on the stack's own dev server: the ceiling."""
    script = peers / "temporal_skeleton.py"
    if not script.exists():
        report.put("skeleton", f"skipped (no {script})")
        return
    clock = Clock()
    temporal_before = ferry.cpu_times()["temporal"]
    written_before = ferry.temporal_written()
    counters = temporal_counters.read(ferry.metrics_url())
    done, skeleton_cpu_s = _run_with_cpu(
        [sys.executable, str(script), ferry.address, str(runs_asked)], timeout=600
    )
    found = re.search(r"latency p50=(\d+)ms\s+N=(\d+) runs/s=([\d.]+)", done.stdout)
    if not found:
        report.put("skeleton", f"failed: {(done.stderr or done.stdout).strip()[-300:]}")
        return
    if done.returncode != 0:  # it has been seen to crash while the interpreter exits, after printing
        report.note(f"temporal_skeleton.py exited {done.returncode} after printing its figures")
    report.put("skeleton_latency_p50_ms", int(found.group(1)))
    report.put("skeleton_runs", int(found.group(2)))
    report.put("skeleton_completion_rate_runs_per_s", float(found.group(3)), 1)
    report.put("skeleton_wall_s", clock.elapsed(), 1)
    # what the ceiling spends, beside throughput_cpu_*: its latency runs included, so a little more
    temporal_s = ferry.cpu_times()["temporal"] - temporal_before
    report.put("skeleton_cpu_temporal_s", temporal_s, 1)
    report.put("skeleton_cpu_worker_s", skeleton_cpu_s, 1)
    runs = int(found.group(2)) + SKELETON_LATENCY_RUNS
    grown = temporal_counters.since(counters, ferry.metrics_url())
    temporal_counters.put_per_run(report, "skeleton", grown, runs)
    report.put("skeleton_cpu_per_run_ms", (temporal_s + skeleton_cpu_s) / runs * 1000, 1)
    written_after = ferry.temporal_written()
    if written_before is not None and written_after is not None:
        report.put("skeleton_temporal_written_mb", written_after - written_before, 1)


async def events_per_run(ferry: FerrySide, r: Report) -> None:
    """History events of one trivial run, Ferry's (the last latency run: its run and job workflows)
    beside the skeleton's (its parent and child): what Temporal writes and replays per run."""
    record = ferry.last_latency_run
    if record is not None:
        run, job = await ferry.run_events(record)
        r.put("events_per_run_ferry", run + job)
        r.put("events_per_run_ferry_run_workflow", run)
        r.put("events_per_run_ferry_job_workflow", job)
    skeleton = await ferry.skeleton_events()
    if skeleton is not None:
        r.put("events_per_run_skeleton", sum(skeleton))
        if record is not None:
            r.put("ratio_events_per_run_ferry_over_skeleton", (run + job) / sum(skeleton), 2)


def _run_with_cpu(command: list[str], timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run `command`; its result and the CPU seconds it used (its own rusage, from wait4)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.2)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(command, proc.returncode, out.read(), err.read())
    return done, usage.ru_utime + usage.ru_stime
