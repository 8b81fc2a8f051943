"""What the CLI shows of a dev environment (docs/attach.md): its IDE link, and in `ferry ps` whether someone
is attached or the time left before its `inactivity_duration` ends it.

The link needs the `Host <run>` entry and the working directory that `ferry attach` learned on this machine
(cli/ssh_hosts.py); the SSH connections are the agent's, asked of the job's workflow
(`JobWorkflow.ssh_endpoint`, which asks the agent). Each ask adds to that workflow's history, so `ferry ps
-w` asks again only every ASK_EVERY seconds and counts down in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cli.ssh_hosts import attached_jobs
from core.configuration import DevEnvironmentConfiguration
from core.status import JobStatus, RunStatus
from core.wire.messages import SSHEndpoint
from core.wire.workflow_ids import job_workflow_id

if TYPE_CHECKING:
    from temporalio.client import Client

    from store import JobSubmissionRecord, RunRecord

ASK_EVERY = 30.0  # seconds between two asks of the same job by `ferry ps -w`
ASK_TIMEOUT = 5.0  # an agent that does not answer by then: nothing shown of its connections
DEV_ENVIRONMENT = "dev-environment"

Runs = Sequence[tuple["RunRecord", Sequence["JobSubmissionRecord"]]]


def ide_link(record: RunRecord, alias: str, working_dir: str) -> str | None:
    """A dev environment's link for its `ide` (VS Code, Cursor and Windsurf take one form, Zed its own)."""
    conf = _dev_configuration(record)
    if conf is None or conf.ide is None:
        return None
    if conf.ide == "zed":
        return f"zed://ssh/{alias}{working_dir}"
    return f"{conf.ide}://vscode-remote/ssh-remote+{alias}{working_dir}"


@dataclass(frozen=True)
class DevView:
    """A running dev environment's job as `ferry ps` shows it."""

    job_id: str  # the job submission it is about
    link: str | None = None  # its IDE link, once `ferry attach` reached this job from here
    asked: bool = False  # its agent told its SSH connections (it has an `inactivity_duration`)
    attached: bool = False  # an SSH connection into it is open
    stops_at: float | None = None  # when its inactivity_duration ends it unless someone attaches

    def ssh_message(self, now: float) -> str | None:
        """`attached`, `idle: stops in 29m 5s`, or None (nothing known)."""
        if self.attached:
            return "attached"
        if self.stops_at is None:
            return None
        left = self.stops_at - now
        return f"idle: stops in {time_left(left)}" if left >= 1 else "idle: stopping"

    def json(self) -> dict[str, object]:
        return {"attached": self.attached, "stops_at": self.stops_at}


def time_left(seconds: float) -> str:
    """`2d 3h`, `1h 0m`, `4m 10s`, `12s`: the two largest units."""
    rest = max(0, int(seconds))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count or parts:
            parts.append(f"{count}{unit}")
    return " ".join(parts[:2]) or "0s"


def _dev_configuration(record: RunRecord) -> DevEnvironmentConfiguration | None:
    if record.type != DEV_ENVIRONMENT:
        return None
    try:
        conf = record.run_configuration()
    except ValueError:
        return None
    return conf if isinstance(conf, DevEnvironmentConfiguration) else None


def running_dev_jobs(runs: Runs) -> list[tuple[RunRecord, JobSubmissionRecord, DevEnvironmentConfiguration]]:
    """The running jobs of the active dev environments among `runs`."""
    found = []
    for run, jobs in runs:
        conf = _dev_configuration(run)
        if conf is None or not RunStatus(run.status).is_active():
            continue
        found += [(run, job, conf) for job in jobs if job.status == JobStatus.RUNNING]
    return found


def dev_views(runs: Runs, home: Path, connections: dict[str, SSHEndpoint | None]) -> dict[str, DevView]:
    """By run id: the running dev environments' views, with what their agents told (`connections`, by job
    id: see ask_connections)."""
    attached = attached_jobs(home)
    views = {}
    for run, job, conf in running_dev_jobs(runs):
        user, working_dir = attached.get(run.run_name, ("", ""))
        link = ide_link(run, run.run_name, working_dir) if user == job.id else None
        told = connections.get(job.id)
        stops_at = None
        if told is not None and told.idle_since is not None and conf.inactivity_duration is not None:
            stops_at = told.idle_since + conf.inactivity_duration
        views[run.id] = DevView(
            job_id=job.id,
            link=link,
            asked=told is not None,
            attached=told is not None and told.ssh_connections > 0,
            stops_at=stops_at,
        )
    return views


def to_ask(runs: Runs) -> list[tuple[RunRecord, JobSubmissionRecord]]:
    """The jobs whose agents `ferry ps` asks: running dev environments with an `inactivity_duration`."""
    return [(run, job) for run, job, conf in running_dev_jobs(runs) if conf.inactivity_duration is not None]


async def ask_connections(
    client: Client, jobs: Sequence[tuple[RunRecord, JobSubmissionRecord]]
) -> dict[str, SSHEndpoint | None]:
    """By job id: the SSH connections into each job, as its agent counts them (None: no answer)."""
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    async def ask(run: RunRecord, job: JobSubmissionRecord) -> SSHEndpoint | None:
        workflow = job_workflow_id(run.workflow_id, job.replica_num, job.job_num, job.submission_num)
        handle = client.get_workflow_handle(workflow)
        try:
            told = await asyncio.wait_for(
                handle.execute_update("ssh_endpoint", result_type=SSHEndpoint), ASK_TIMEOUT
            )
        except (TimeoutError, RPCError, WorkflowUpdateFailedError):
            return None
        return None if told.refused is not None else told

    answers = await asyncio.gather(*(ask(run, job) for run, job in jobs))
    return {job.id: answer for (_, job), answer in zip(jobs, answers, strict=True)}
