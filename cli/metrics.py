"""`ferry metrics RUN`: the CPU, memory and GPU use of each job of a run, as their agents sample it now
(docs/jobs.md#metrics); `-w` refreshes it every WATCH_INTERVAL seconds until Ctrl-C or the run's end.

The agents are reached the way the worker reaches them (their addresses and tokens stay there): each
sample is a MetricsWorkflow, one activity that asks every running job's agent at once, started by Ferry's
API for the logged-in user, or by an operator's CLI itself (cli/run_tool_clients.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live

from api.run_tool_messages import RunMetrics
from cli import exit_codes, render
from cli.context import Context
from cli.errors import CommandError, FerryError
from cli.run_tool_clients import RunTools, run_tools
from cli.tables import Column, FittedTable, Row
from core.status import RunStatus
from core.wire.agent_api import BYTES_PER_GB, TaskMetrics

if TYPE_CHECKING:
    from store import JobSubmissionRecord, RunRecord

WATCH_INTERVAL = 2.0
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
    tools = run_tools(Context.from_env())
    try:
        return asyncio.run(_metrics(tools, run_name, watch=watch, as_json=as_json))
    except KeyboardInterrupt:
        return exit_codes.OK


async def _metrics(tools: RunTools, run_name: str, *, watch: bool, as_json: bool) -> int:
    answer = await tools.metrics(run_name)  # NOT_FOUND for no such run, USAGE for a finished one
    console = render.console()
    if not watch:
        _show(console, answer.run, job_samples(answer), as_json)
        return exit_codes.OK
    live = Live(console=console, auto_refresh=False) if console.is_terminal and not as_json else None
    with live or contextlib.nullcontext():
        while True:
            if live is not None:
                live.update(metrics_table(job_samples(answer)), refresh=True)
            else:
                _show(console, answer.run, job_samples(answer), as_json)
            await asyncio.sleep(WATCH_INTERVAL)
            latest = await _next_sample(tools, answer.run)
            if not isinstance(latest, RunMetrics):
                render.console(stderr=True).print(
                    f"run {latest.run_name} has finished ({latest.status})", highlight=False
                )
                return exit_codes.OK
            answer = latest


async def _next_sample(tools: RunTools, record: RunRecord) -> RunMetrics | RunRecord:
    """A new sample of the run; its record instead once it has finished."""
    record = await tools.get_run(record.id) or record
    if RunStatus(record.status).is_finished():
        return record
    try:
        return await tools.metrics(record.id, by_id=True)
    except (FerryError, CommandError) as err:  # USAGE: it has finished since it was read
        ended = await tools.get_run(record.id)
        if err.exit_code != exit_codes.USAGE or ended is None or not RunStatus(ended.status).is_finished():
            raise
        return ended


def job_samples(answer: RunMetrics) -> list[JobSample]:
    return [JobSample(found.job, found.metrics, found.unavailable) for found in answer.jobs]


def _show(console: Console, record: RunRecord, samples: list[JobSample], as_json: bool) -> None:
    if as_json:  # one object per sample: with -w, one line each
        print(json.dumps(metrics_json(record, samples)), flush=True)
    else:
        console.print(metrics_table(samples))
        sys.stdout.flush()


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
