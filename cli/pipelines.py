"""`ferry apply -f FILE` of a pipeline's file (docs/pipelines.md): its tasks in a plan, one run submitted,
followed to its end (the tasks' statuses in turn) unless detached."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from cli import render
from cli.context import Context, confirm
from cli.errors import USAGE_EXIT, CommandError
from core.configuration.pipeline import LoadedPipeline
from core.status import RunStatus

if TYPE_CHECKING:
    from cli.pipeline_clients import PipelinesClient


def apply_pipeline(
    ctx: Context, loaded: LoadedPipeline, *, yes: bool, detach: bool, name: str | None, after: list[str]
) -> int:
    if after:
        raise CommandError("--after: a pipeline cannot wait for other runs yet", USAGE_EXIT)
    pipeline = loaded.pipeline
    if name is not None:
        pipeline = pipeline.model_copy(update={"name": name})
    console = render.console(stderr=True)
    console.print(plan_table(loaded.file, pipeline.name, loaded))
    if not confirm("Submit the pipeline?", yes=yes):
        return 1
    from cli.pipeline_clients import pipelines_client

    pipelines = pipelines_client(ctx)  # through Ferry's API as the logged-in user (docs/teams.md#pipelines)
    return asyncio.run(_submit(pipelines, loaded, pipeline.name, detach=detach))


def plan_table(file: str, name: str | None, loaded: LoadedPipeline) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold", title=f"Pipeline {name or '(generated)'}")
    for column in ("TASK", "NAME", "RESOURCES", "SCALE", "RETRY"):
        table.add_column(column)
    for index, task in enumerate(loaded.pipeline.tasks, start=1):
        summary = task.summary()
        table.add_row(
            f"{index} of {len(loaded.pipeline.tasks)}",
            summary.name,
            summary.resources,
            summary.scale,
            summary.retry,
        )
    table.caption = f"{file}: one run, its tasks one after another"
    return table


async def _submit(
    pipelines: PipelinesClient, loaded: LoadedPipeline, name: str | None, *, detach: bool
) -> int:
    from cli.follow import follow_run

    console = render.console(stderr=True)
    pipeline = loaded.pipeline.model_copy(update={"name": name})
    repo_dir = Path(loaded.file).resolve().parent
    record = await pipelines.submit(pipeline, repo_dir=repo_dir)
    count = len(pipeline.tasks)
    console.print(f"run {record.run_name} submitted (id {record.id}): {count} tasks", highlight=False)
    if detach:
        console.print(f"follow it with: ferry ps; a task's logs: ferry logs {record.run_name} --task N")
        return 0
    final = await follow_run(pipelines.store, record, status_console=console, on_interrupt=lambda: False)
    console.print(
        f"run {final.run_name}: {final.status} ({final.status_message})", highlight=False, markup=False
    )
    return 0 if final.status == RunStatus.DONE else 1
