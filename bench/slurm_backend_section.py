"""The `slurm-backend` section: Ferry's Slurm backend beside Slurm itself, on one test cluster
(testbed.slurm_cluster: slurmctld here, three 2-CPU nodes and a login host in network namespaces), with the
bench's embedded stack doing the work (docs/backends.md).

Three figures, each beside Slurm's own for the same work in the same invocation:

- **fresh allocation**: a task submitted to an empty `nodes: 0..1` fleet, until its process starts (its
  `start` event): the backend's first (the agent's bundle built, sent, unpacked), then another once that
  allocation is released, against `sbatch` of the same shape until `squeue` says RUNNING (polled every 50 ms);
- **preemption**: a run on the preemptible partition, preempted by a job of the higher one, until its new
  submission's process starts on a new allocation; beside the run's retry backoff (15 s) plus Slurm's own
  allocation time, the issue's goal;
- **short tasks**: N `true` tasks through a `nodes: 0..3` fleet of whole nodes split in two blocks, against
  N `sbatch` jobs of one CPU on the same partition (six at a time either way): the completion rate.

Nothing of either is left behind: the section checks `squeue` is empty at its end.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import Clock
from cli.backend_api import record_backend
from core.backends.slurm import fleet_prefix
from core.configuration import FleetConfiguration, SlurmBackendConfiguration, parse_configuration
from store.keys import process_keys
from testbed.fleets import task, until
from testbed.slurm_cluster import SlurmCluster, missing_tools

if TYPE_CHECKING:
    from bench.ferry_side import FerrySide
    from cli.api import FerryAPI
    from store import RunRecord

PROJECT = "slurm-backend"
WAIT = 300.0  # seconds any one step may take: a bound, not a figure
NODE = {"cpu": 1, "memory": "0.9GB", "disk": "0GB.."}
WHOLE_NODE = {"cpu": 2, "memory": "1.9GB", "disk": "0GB.."}


def unavailable() -> str | None:
    import os

    if os.geteuid() != 0:
        return "a Slurm cluster in network namespaces needs root"
    missing = missing_tools()
    return f"missing {', '.join(missing)}" if missing else None


async def measure(side: FerrySide, workdir: Path, tasks: int) -> None:
    r = side.report
    cluster = await asyncio.to_thread(SlurmCluster(workdir).up)
    api = side.api(PROJECT)
    backend = SlurmBackendConfiguration.model_validate(cluster.backend(workdir / "shared"))
    keys = process_keys({"FERRY_HOME": str(side.home)})  # the stack's worker opens the login key with them
    record_backend(side.store, PROJECT, backend, cluster.login.identity_file.read_text(), keys)
    fleets: list[str] = []
    try:
        await _fresh(side, api, cluster, fleets)
        await _preemption(side, api, cluster, fleets)
        await _short_tasks(side, api, cluster, fleets, tasks)
    finally:
        for fleet in fleets:
            await api.fleets().delete(fleet, wait=WAIT)
        await until("the fleets' allocations to end", lambda: not cluster.jobs(finished=False), WAIT)
        r.put("slurm_backend_jobs_left", len(cluster.jobs(finished=False)))
        await asyncio.to_thread(cluster.down)


def _fleet(fleets: list[str], **fields: object) -> FleetConfiguration:
    name = f"sb-{secrets.token_hex(2)}"
    fleets.append(name)
    conf = parse_configuration({"type": "fleet", "name": name, "resources": NODE} | fields)
    assert isinstance(conf, FleetConfiguration)
    return conf


async def _started(side: FerrySide, record: RunRecord, submission: int = 0) -> float:
    """When the submission's process started (its `start` event)."""

    def found() -> float | None:
        for job in side.store.list_job_submissions(record.id):
            if job.submission_num == submission:
                for event in side.api(PROJECT).job_events(record, job.id):
                    if event.name == "start":
                        return event.timestamp
        return None

    return float(await until(f"submission {submission} to start", found, WAIT))


async def _slurm_running(cluster: SlurmCluster, *args: str) -> float:
    """Seconds from `sbatch` to RUNNING in squeue, polled every 50 ms; the job cancelled after."""
    clock = Clock()
    job = cluster.slurm("sbatch", "--parsable", "-o", "/dev/null", *args).strip()
    try:
        while cluster.job(job).get("JobState") not in ("RUNNING", "COMPLETED", "COMPLETING"):
            await asyncio.sleep(0.05)
        return clock.elapsed()
    finally:
        cluster.slurm("scancel", job)
        await until("Slurm's job to end", lambda: not cluster.jobs(finished=False), WAIT)


async def _fresh(side: FerrySide, api: FerryAPI, cluster: SlurmCluster, fleets: list[str]) -> None:
    r = side.report
    fleet = _fleet(fleets, nodes="0..1", idle_duration="1s")
    await api.fleets().apply(fleet)
    submitted = time.time()
    record = await api.submit(
        task(["true"], resources=NODE, fleets=[fleet.name]), repo_dir=side.repo, run_name="fresh"
    )
    started = await _started(side, record)
    # The first allocation of a backend builds the agent's bundle, sends it and unpacks it on the nodes.
    r.put("slurm_backend_first_allocation_to_running_s", started - submitted)
    await side.result(record)
    prefix = fleet_prefix(PROJECT, fleet.name or "")
    await until("the idle allocation's release", lambda: not _ours(cluster, prefix), WAIT)
    submitted = time.time()
    record = await api.submit(
        task(["true"], resources=NODE, fleets=[fleet.name]), repo_dir=side.repo, run_name="fresh-again"
    )
    started = await _started(side, record)
    r.put("slurm_backend_fresh_allocation_to_running_s", started - submitted)
    slurm = await _slurm_running(cluster, "-p", "high", "-c", "1", "--mem=922M", "--wrap", "sleep 30")
    r.put("slurm_sbatch_to_running_s", slurm)
    r.put("slurm_backend_fresh_allocation_ratio", (started - submitted) / slurm if slurm else 0.0)


def _ours(cluster: SlurmCluster, prefix: str) -> list[dict[str, str]]:
    return [job for job in cluster.jobs(finished=False) if job["name"].startswith(prefix)]


async def _preemption(side: FerrySide, api: FerryAPI, cluster: SlurmCluster, fleets: list[str]) -> None:
    r = side.report
    fleet = _fleet(fleets, nodes="0..1", spot_policy="spot", idle_duration="1s")
    await api.fleets().apply(fleet)
    mark = side.marks / f"slurm-preempt-{secrets.token_hex(2)}"
    command = f"if [ -e {mark} ]; then true; else touch {mark}; sleep 3600; fi"
    retry = {"on_events": ["interruption"], "duration": "1h"}
    record = await api.submit(
        task([command], resources=NODE, fleets=[fleet.name], retry=retry),
        repo_dir=side.repo,
        run_name="preempted",
    )
    await _started(side, record)
    nodes = str(len(cluster.node_names))
    preempted_at = time.time()
    clock = Clock()
    preemptor = cluster.slurm(
        "sbatch", "--parsable", "-o", "/dev/null", "-p", "high", "-N", nodes, "--wrap", "sleep 5"
    )
    while cluster.job(preemptor.strip()).get("JobState") != "RUNNING":
        await asyncio.sleep(0.05)
    slurm_allocation = clock.elapsed()
    back = await _started(side, record, submission=1)
    r.put("slurm_backend_preempted_to_running_again_s", back - preempted_at)
    r.put("slurm_preemptor_sbatch_to_running_s", slurm_allocation)
    r.put("slurm_backend_preemption_goal_s", 15.0 + slurm_allocation + 5.0)  # backoff + Slurm's + its 5 s
    await side.result(record)
    cluster.slurm("scancel", preemptor.strip())


async def _short_tasks(
    side: FerrySide, api: FerryAPI, cluster: SlurmCluster, fleets: list[str], tasks: int
) -> None:
    r = side.report
    r.put("slurm_backend_short_tasks", tasks)
    fleet = _fleet(fleets, nodes="0..3", resources=WHOLE_NODE, blocks=2, idle_duration="10s")
    await api.fleets().apply(fleet)
    clock = Clock()
    records = await asyncio.gather(
        *(
            api.submit(
                task(["true"], resources=NODE, fleets=[fleet.name]), repo_dir=side.repo, run_name=f"short-{k}"
            )
            for k in range(tasks)
        )
    )
    await asyncio.gather(*(side.result(record) for record in records))
    ferry = clock.elapsed()
    r.put("slurm_backend_short_tasks_per_s", tasks / ferry)
    prefix = fleet_prefix(PROJECT, fleet.name or "")
    r.put(
        "slurm_backend_short_tasks_allocations",
        len([j for j in cluster.jobs() if j["name"].startswith(prefix)]),
    )
    clock = Clock()
    ids = [
        cluster.slurm(
            "sbatch", "--parsable", "-o", "/dev/null", "-p", "high", "-c", "1", "--mem=922M", "--wrap", "true"
        ).strip()
        for _ in range(tasks)
    ]
    await until("Slurm's jobs to end", lambda: not cluster.jobs(finished=False), WAIT)
    slurm = clock.elapsed()
    r.put("slurm_short_jobs_per_s", len(ids) / slurm)
    r.put("slurm_backend_short_tasks_ratio", (tasks / ferry) / (len(ids) / slurm))
