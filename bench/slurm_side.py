"""Slurm's side of the comparison: the one-node Slurm of ../shared/peers/slurm, timed the way its bench.sh
times it, so that Ferry's figures and Slurm's can alternate in one invocation.

setup.sh (installs slurm-wlm and munge from Debian's packages when missing, renders the profile's
slurm.conf, starts munged, slurmctld and slurmd) and stop.sh are run as they are. The workloads are the
parts of bench.sh that Ferry's sections match, in Python so they can be interleaved with Ferry's:
- a sequential trivial job: `sbatch --wrap "date +%s.%N > start.$SLURM_JOB_ID"`, then `scontrol -o show
  job` every 10 ms until it is COMPLETED (bench.sh's b2b latency, and its job-written start time);
- N separate `sbatch -o /dev/null --wrap true` from one client, then `squeue` every 0.1 s until empty
  (bench.sh's sepN throughput); each job's end is when it left the queue.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from bench.common import Clock, Report
from bench.ferry_side import BurstResult

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"}
_STATE = re.compile(r"JobState=([A-Z_]+)")


class SlurmError(RuntimeError):
    pass


def _run(command: list[str], timeout: float = 30) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SlurmError(f"{' '.join(command[:2])}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


class SlurmSide:
    def __init__(self, peer_dir: Path, work: Path, report: Report) -> None:
        self.peer_dir = peer_dir
        self.work = work
        self.report = report
        self.jobs = work / "jobs"
        self.env = {**os.environ, "SLURM_PEER_WORK": str(work)}
        self.profile: str | None = None

    def unavailable(self) -> str | None:
        """Why Slurm cannot run here, or None."""
        if not (self.peer_dir / "setup.sh").exists():
            return f"no {self.peer_dir}/setup.sh"
        if os.geteuid() != 0:
            return "setup.sh needs root (it installs packages and writes /etc/slurm)"
        return None

    def setup(self, profile: str) -> None:
        """setup.sh PROFILE: install if needed, (re)start the daemons; its log goes to the work dir."""
        self.work.mkdir(parents=True, exist_ok=True)
        installed = shutil.which("slurmctld") is not None or Path("/usr/sbin/slurmctld").exists()
        clock = Clock()
        log = self.work / f"setup.{profile}.log"
        with log.open("w") as out:
            done = subprocess.run(
                ["bash", str(self.peer_dir / "setup.sh"), profile],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                timeout=900,
            )
        if done.returncode != 0:
            raise SlurmError(f"setup.sh {profile} failed (status {done.returncode}); see {log}")
        key = "slurm_setup_with_install_s" if not installed else f"slurm_setup_{profile}_s"
        self.report.put(key, clock.elapsed(), 1)
        self.profile = profile
        self.jobs.mkdir(parents=True, exist_ok=True)
        self.report.put(f"slurm_{profile}_job_slots", self.job_slots())
        # The first job after a start is slower (bench.sh warms up the same way).
        self.latency_sample(-1)

    def stop(self) -> None:
        subprocess.run(
            ["bash", str(self.peer_dir / "stop.sh")], env=self.env, capture_output=True, timeout=120
        )

    def job_slots(self) -> int:
        """CPUs x the partition's OverSubscribe factor: how many 1-CPU jobs run at once."""
        cpus = int(re.search(r"CPUTot=(\d+)", _run(["scontrol", "-o", "show", "node"])).group(1))  # type: ignore[union-attr]
        over = re.search(r"OverSubscribe=FORCE:(\d+)", _run(["scontrol", "show", "partition"]))
        return cpus * (int(over.group(1)) if over else 1)

    def version(self) -> str:
        return _run(["sinfo", "-V"]).split()[-1]

    def _state(self, job_id: str) -> str | None:
        found = _STATE.search(_run(["scontrol", "-o", "show", "job", job_id]))
        return found.group(1) if found else None

    def latency_sample(self, index: int) -> tuple[float, float]:
        """One sequential trivial job: (submit -> its process started, submit -> COMPLETED seen)."""
        t0 = time.time()
        job_id = _run(
            [
                "sbatch",
                "--parsable",
                "-o",
                "/dev/null",
                "--wrap",
                f"date +%s.%N > {self.jobs}/start.$SLURM_JOB_ID",
            ]
        ).strip()
        while True:
            state = self._state(job_id)
            if state in TERMINAL:
                break
            time.sleep(0.01)
        t2 = time.time()
        if state != "COMPLETED":
            raise SlurmError(f"job {job_id} ended {state}")
        started = float((self.jobs / f"start.{job_id}").read_text())
        return started - t0, t2 - t0

    def burst(self, count: int) -> BurstResult:
        """`count` separate trivial jobs from one client, then until the queue is empty (10 min at most)."""
        while _run(["squeue", "-h", "-o", "%i"]).strip():
            time.sleep(0.1)
        submitted: dict[str, float] = {}
        t0 = time.time()
        for _ in range(count):
            at = time.time()
            job_id = _run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"]).strip()
            submitted[job_id] = at
        t1 = time.time()
        ended: dict[str, float] = {}
        deadline = time.monotonic() + 600
        while len(ended) < count and time.monotonic() < deadline:
            queued = set(_run(["squeue", "-h", "-o", "%i"]).split())
            now = time.time()
            for job_id in submitted:
                if job_id not in queued and job_id not in ended:
                    ended[job_id] = now
            if len(ended) < count:
                time.sleep(0.1)
        completed = self._completed(set(submitted))
        return BurstResult(
            submit_s=t1 - t0,
            all_done_s=max(ended.values(), default=time.time()) - t0,
            completed=completed,
            failed=len(ended) - completed,
            per_run_s=[ended[j] - submitted[j] for j in ended],
        )

    def array(self, count: int) -> BurstResult:
        """One `sbatch --array=1-count --wrap true` (bench.sh's arrayN), then until the queue is empty (10
        min at most); its tasks' COMPLETED records are those of job ids past the last one before it."""
        while _run(["squeue", "-h", "-o", "%i"]).strip():
            time.sleep(0.1)
        before = self._last_job_id()
        t0 = time.time()
        _run(["sbatch", "--parsable", f"--array=1-{count}", "-o", "/dev/null", "--wrap", "true"])
        t1 = time.time()
        deadline = time.monotonic() + 600
        while _run(["squeue", "-h", "-r", "-o", "%i"]).strip() and time.monotonic() < deadline:
            time.sleep(0.1)
        t2 = time.time()
        completed = 0
        for _ in range(20):  # the records may lag the queue a little
            records = self._records()
            completed = sum(1 for job_id, state in records if job_id > before and state == "COMPLETED")
            if completed >= count:
                break
            time.sleep(0.1)
        failed = count - completed
        return BurstResult(submit_s=t1 - t0, all_done_s=t2 - t0, completed=completed, failed=failed)

    def _records(self) -> list[tuple[int, str]]:
        """(JobId, JobState) of each record in jobcomp.txt."""
        try:
            lines = (self.work / "run" / "jobcomp.txt").read_text().splitlines()
        except OSError:
            return []
        found = []
        for line in lines:
            job = re.match(r"JobId=(\d+) ", line)
            state = _STATE.search(line)
            if job and state:
                found.append((int(job.group(1)), state.group(1)))
        return found

    def _last_job_id(self) -> int:
        return max((job_id for job_id, _ in self._records()), default=0)

    def _completed(self, ids: set[str]) -> int:
        """Jobs among `ids` with a COMPLETED record in jobcomp.txt (it may lag the queue a little)."""
        path = self.work / "run" / "jobcomp.txt"
        count = 0
        for _ in range(20):
            try:
                lines = path.read_text().splitlines()
            except OSError:
                lines = []
            count = sum(
                1
                for line in lines
                if " JobState=COMPLETED " in line and line.split(" ", 1)[0].removeprefix("JobId=") in ids
            )
            if count >= len(ids):
                break
            time.sleep(0.1)
        return count
