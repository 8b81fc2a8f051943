"""`ferry metrics RUN`: the CPU, memory and GPU use of each job of a run, as their agents sample it now
(docs/jobs.md#metrics); `-w` refreshes it every WATCH_INTERVAL seconds until Ctrl-C or the run's end.

The agents are reached the way the worker reaches them (their addresses and tokens stay there): each
sample is a MetricsWorkflow, one activity that asks every running job's agent at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from temporalio.client import WorkflowFailureError

from cli import exit_codes, render
from cli.context import Context
from cli.errors import CommandError, RunNotFound
from cli.pipeline_tasks import run_jobs, task_run
from cli.tables import Column, FittedTable, Row
from core.status import JobStatus, RunStatus
from core.wire.agent_api import BYTES_PER_GB, TaskMetrics
from core.wire.messages import JobMetrics, MetricsReply, MetricsRequest, TaskRef
from core.wire.workflow_ids import metrics_workflow_id
from workflows.metrics import MetricsWorkflow

if TYPE_CHECKING:
    from cli.api import FerryAPI
    from store import JobSubmissionRecord, RunRecord

WATCH_INTERVAL = 2.0
SAMPLE_TIMEOUT = timedelta(seconds=30)  # the whole sample: its workflow, the activity and every agent
COLUMNS = (
    Column("REPLICA"),
    Column("JOB"),
    Column("INSTANCE"),
    Column("STATUS"),
    Column("CPU"),
    Column("MEMORY"),
    Column("GPU", flexible=True),
)


@dataclass(frozen=True)
class JobSample:
    job: JobSubmissionRecord
    metrics: TaskMetrics | None = None
    unavailable: str | None = None  # a running job's agent could not say


def metrics(run_name: str, *, watch: bool, as_json: bool) -> int:
    ctx = Context.from_env()
    try:
        return asyncio.run(_metrics(ctx, run_name, watch=watch, as_json=as_json))
    except KeyboardInterrupt:
        return exit_codes.OK


async def _metrics(ctx: Context, run_name: str, *, watch: bool, as_json: bool) -> int:
    store = ctx.store()
    try:
        record = ctx.find_run(store, run_name)
    except RunNotFound as err:
        raise CommandError(str(err), exit_codes.NOT_FOUND) from None
    if RunStatus(record.status).is_finished():
        # What can never happen: a finished run's jobs have no processes left to measure.
        message = f"run {record.run_name} has finished ({record.status}): it has no live metrics"
        raise CommandError(message, exit_codes.USAGE)
    api = await ctx.api()
    console = render.console()
    if not watch:
        _show(console, record, await sample(api, record), as_json)
        return exit_codes.OK
    live = Live(console=console, auto_refresh=False) if console.is_terminal and not as_json else None
    with live or contextlib.nullcontext():
        while True:
            latest = await asyncio.to_thread(store.get_run, record.id)
            record = latest or record
            if RunStatus(record.status).is_finished():
                render.console(stderr=True).print(
                    f"run {record.run_name} has finished ({record.status})", highlight=False
                )
                return exit_codes.OK
            samples = await sample(api, record)
            if live is not None:
                live.update(metrics_table(samples), refresh=True)
            else:
                _show(console, record, samples, as_json)
            await asyncio.sleep(WATCH_INTERVAL)


def _show(console: Console, record: RunRecord, samples: list[JobSample], as_json: bool) -> None:
    if as_json:  # one object per sample: with -w, one line each
        print(json.dumps(metrics_json(record, samples)), flush=True)
    else:
        console.print(metrics_table(samples))
        sys.stdout.flush()


async def sample(api: FerryAPI, record: RunRecord) -> list[JobSample]:
    """The latest submission of each of the run's jobs (a pipeline's current task's), the running ones
    with what their agents measure now."""
    store = api.store
    current = await asyncio.to_thread(task_run, store, record, None)
    jobs = render.latest_jobs(await asyncio.to_thread(run_jobs, store, current))
    running = [job for job in jobs if job.status == JobStatus.RUNNING and job.instance_name]
    replies: dict[str, JobMetrics] = {}
    if running:
        refs = [TaskRef(job_submission_id=job.id, instance_name=job.instance_name or "") for job in running]
        try:
            reply: MetricsReply = await api.client.execute_workflow(
                MetricsWorkflow.run,
                MetricsRequest(tasks=refs),
                id=metrics_workflow_id(record.workflow_id, secrets.token_hex(6)),
                task_queue=api.task_queue,
                execution_timeout=SAMPLE_TIMEOUT,
            )
        except WorkflowFailureError as err:  # timed out: no worker took it, or its agents did not answer
            raise CommandError(f"run {record.run_name}: no sample of its metrics: {err.cause}") from None
        replies = {answer.job_submission_id: answer for answer in reply.jobs}
    samples = []
    for job in jobs:
        answer = replies.get(job.id)
        if answer is None:
            samples.append(JobSample(job))
        else:
            samples.append(JobSample(job, answer.metrics, answer.unavailable))
    return samples


def size(count: int) -> str:
    """Bytes as `512MB` or `1.5GB` (dstack's units: a GB is 2**30 bytes)."""
    if count >= BYTES_PER_GB:
        return f"{count / BYTES_PER_GB:.1f}GB"
    return f"{count / 2**20:.0f}MB"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def gpu_cell(metrics: TaskMetrics) -> str:
    """`gpu0 87% 59.8GB/79.6GB, gpu1 ...`; `-` without GPUs."""
    parts = []
    for gpu in metrics.gpus:
        used = "-" if gpu.memory_used_bytes is None else size(gpu.memory_used_bytes)
        total = "-" if gpu.memory_total_bytes is None else size(gpu.memory_total_bytes)
        parts.append(f"gpu{gpu.index} {_percent(gpu.utilization_percent)} {used}/{total}")
    return ", ".join(parts) or "-"


def metrics_table(samples: list[JobSample]) -> FittedTable:
    rows = []
    for found in samples:
        job, figures = found.job, found.metrics
        cells = [str(job.replica_num), str(job.job_num), job.instance_name or "", job.status]
        notes = [f"no metrics: {found.unavailable}"] if found.unavailable else []
        if figures is None:
            rows.append(Row((*cells, "-", "-", "-"), notes))
            continue
        memory = f"{size(figures.memory_used_bytes)}/{size(figures.memory_limit_bytes)}"
        rows.append(Row((*cells, f"{figures.cpu_percent:.0f}%", memory, gpu_cell(figures)), notes))
    return FittedTable(COLUMNS, rows)


def metrics_json(record: RunRecord, samples: list[JobSample]) -> dict[str, Any]:
    """`ferry metrics --json` (docs/jobs.md#metrics): the run, and each job with its agent's TaskMetrics."""
    return {
        "run": record.run_name,
        "id": record.id,
        "status": record.status,
        "sampled_at": time.time(),
        "jobs": [
            {
                "id": found.job.id,
                "replica": found.job.replica_num,
                "job": found.job.job_num,
                "submission": found.job.submission_num,
                "status": found.job.status,
                "instance": found.job.instance_name,
                "metrics": None if found.metrics is None else found.metrics.model_dump(mode="json"),
                "unavailable": found.unavailable,
            }
            for found in samples
        ],
    }
