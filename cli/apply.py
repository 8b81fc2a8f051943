"""`ferry apply -f FILE`: validate, show the plan, confirm, submit, then follow the run to its end."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.table import Table

from cli import exit_codes, render
from cli.context import Context, confirm, ensure_can_ask
from cli.errors import ABORTS, USAGE_EXIT, CommandError
from core.configuration import (
    DevEnvironmentConfiguration,
    FleetConfiguration,
    NotARun,
    RunConfiguration,
    ServiceConfiguration,
    SlurmBackendConfiguration,
    TaskConfiguration,
    VolumeConfiguration,
)
from core.configuration.fields import Name
from core.configuration.pipeline import LoadedPipeline, load_run_file
from core.configuration.specs import Dependency, DependencySpec
from core.durations import format_duration
from core.status import RunStatus
from store.repository import Store

if TYPE_CHECKING:
    from cli.remote_runs import RunsClient
    from store import RunRecord

INTERRUPTED_EXIT = exit_codes.INTERRUPTED
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def apply(
    file: str,
    *,
    yes: bool,
    detach: bool,
    name: str | None,
    env: list[str],
    after: list[str] | None = None,
    run_args: list[str] | None = None,
) -> int:
    """The command's body; its exit code: 0 only if the run ended DONE (or was submitted, with -d)."""
    ctx = Context.from_env()
    loaded = load_run_file(file)
    loaded.ensure_runnable()  # refused here, before the plan: nothing is submitted
    warning = loaded.warning()
    if warning:
        typer.echo(warning, err=True)
    takes_args = not isinstance(loaded, LoadedPipeline) and isinstance(
        loaded.configuration, TaskConfiguration | ServiceConfiguration
    )
    if run_args and not takes_args:
        # ${{ run.args }} is a task's or a service's (core.configuration.interpolation).
        raise CommandError(f"{file}: only a task or a service takes arguments after --", USAGE_EXIT)
    if isinstance(loaded, LoadedPipeline):
        from cli.pipelines import apply_pipeline

        return apply_pipeline(ctx, loaded, yes=yes, detach=detach, name=name, after=after or [])
    configuration = loaded.configuration
    if isinstance(configuration, FleetConfiguration):
        from cli.fleet import apply_fleet

        return apply_fleet(loaded, yes=yes, detach=detach, name=name)
    if isinstance(configuration, VolumeConfiguration):
        from cli.volume import apply_volume

        return apply_volume(loaded, yes=yes, name=name)
    if isinstance(configuration, SlurmBackendConfiguration):
        from cli.backend import apply_backend

        return apply_backend(loaded, yes=yes, name=name)
    configuration = with_overrides(configuration, name=name, env=env, after=after or [])
    configuration = configuration.with_run_args(run_args or [])  # shown resolved in the plan too
    console = render.console(stderr=True)
    if ctx.starts_stack():
        ensure_can_ask(yes=yes)  # said before the plan starts the embedded stack for its API
    runs = ctx.runs(submitting=True)  # through Ferry's API (docs/teams.md#runs)
    console.print(plan_table(ctx, runs, file, configuration))
    if not confirm("Submit the run?", yes=yes):
        return 1
    repo_dir = Path(file).resolve().parent
    return asyncio.run(_submit(ctx, runs, configuration, repo_dir, console, yes=yes, detach=detach))


def with_overrides(
    configuration: RunConfiguration, *, name: str | None, env: list[str], after: list[str] | None = None
) -> RunConfiguration:
    """`-n NAME`, `-e KEY=VALUE` (or `-e KEY`, from the environment) and `--after NAME[:CONDITION]` over
    the file's fields."""
    update: dict[str, object] = {}
    if name is not None:
        try:
            update["name"] = TypeAdapter(Name).validate_python(name)
        except ValidationError as err:
            raise CommandError(
                f"-n: {err.errors()[0]['msg'].removeprefix('Value error, ')}", USAGE_EXIT
            ) from None
    if env:
        merged = dict(configuration.env)
        for item in env:
            key, sep, value = item.partition("=")
            if not _ENV_KEY.match(key):
                raise CommandError(f"-e {item!r}: expected KEY=VALUE or KEY", USAGE_EXIT)
            merged[key] = value if sep else None
        update["env"] = merged
    if after:
        if configuration.schedule is not None:
            raise CommandError("--after: cannot be used with a scheduled run (`schedule`)", USAGE_EXIT)
        depends_on = list(configuration.depends_on)
        for item in after:
            dependency = _after(item)
            if any(d.run == dependency.run for d in depends_on):
                raise CommandError(
                    f"--after {item!r}: run {dependency.run} is already waited for", USAGE_EXIT
                )
            depends_on.append(dependency)
        update["depends_on"] = depends_on
    # A run depending on itself (by -n) is refused at submission, with the cycles (FerryAPI).
    return configuration.model_copy(update=update) if update else configuration


def _after(item: str) -> DependencySpec:
    try:
        return TypeAdapter(Dependency).validate_python(item)
    except ValidationError as err:
        raise CommandError(
            f"--after {item!r}: {err.errors()[0]['msg'].removeprefix('Value error, ')}", USAGE_EXIT
        ) from None


async def _deploy_in_place(
    api: RunsClient, active: RunRecord, configuration: RunConfiguration, console: Console, *, yes: bool
) -> int | None:
    """A changed service re-applied: a rolling deployment (docs/services.md#rolling-deployment); a changed
    scheduled run re-applied: its schedule and next cycles take it (docs/schedules.md); the exit status, or
    None where the run must be restarted instead (another run type, or a field that cannot change)."""
    from core.configuration import parse_configuration
    from core.runs.deploying import changed_fields, is_rescheduling, not_in_place

    name = active.run_name
    old = parse_configuration(active.configuration_data())
    if isinstance(old, NotARun):
        return None
    scheduled = is_rescheduling(old, configuration)
    if not scheduled and not (
        isinstance(old, ServiceConfiguration) and isinstance(configuration, ServiceConfiguration)
    ):
        return None
    fixed = not_in_place(old, configuration)
    if fixed:
        console.print(f"run {name}: {', '.join(fixed)} cannot change in place", highlight=False)
        return None
    changed = changed_fields(old, configuration)
    if not changed:
        console.print(f"run {name}: no changes", highlight=False)
        return 0
    how = (
        "its schedule and its next cycles take the new configuration"
        if scheduled
        else "a rolling deployment replaces its replicas one at a time"
    )
    console.print(f"run {name}: changed {', '.join(changed)}: {how}", highlight=False)
    if not confirm(f"Update run {name} in place?", yes=yes):
        return 1
    deployed = await api.deploy(name, configuration)
    reply = deployed.reply
    if reply.refused is not None:
        raise CommandError(f"run {name}: {reply.refused}")
    if scheduled:
        assert configuration.schedule is not None  # is_rescheduling refuses a schedule removed
        if reply.after_cycle is not None:
            console.print(
                f"run {name}: cycle {reply.after_cycle} goes on as it started; the next cycles run the new "
                "configuration",
                highlight=False,
            )
        console.print(schedule_line(configuration.schedule.cron), highlight=False)
        return 0
    assert isinstance(configuration, ServiceConfiguration)
    console.print(
        f"run {name}: deployment {reply.deployment} rolling out (ferry ps shows it)", highlight=False
    )
    for note in deployed.notes:  # where the service answers (docs/services.md)
        console.print(note, highlight=False)
    return 0


def schedule_line(crons: list[str], count: int = 3) -> str:
    from core.runs.cycles import next_triggers
    from core.runs.status_words import format_utc

    times = next_triggers(crons, time.time(), count)
    return "scheduled: next at " + ", ".join(format_utc(t) for t in times)


def plan_table(ctx: Context, runs: RunsClient, file: str, configuration: RunConfiguration) -> Table:
    summary = configuration.summary()
    # Who submits it and the fleet it goes to, as the submission will choose it (docs/fleets.md).
    plan = runs.plan(configuration)
    where = plan.runs_on
    if ctx.settings.temporal_address is not None and isinstance(runs.store, Store):  # an operator's CLI
        where += f", by the workers of {ctx.settings.temporal_address}"
    rows = [
        ("Project", ctx.project),
        ("User", plan.user),
        ("Configuration", file),
        ("Type", configuration.type),
        ("Name", configuration.name or "(generated when submitted)"),
        ("Resources", configuration.resources.pretty()),
        ("Scale", summary.scale),
        ("Retry", summary.retry),
        ("Max duration", format_duration(configuration.max_duration)),
        *([("Schedule", f"{summary.schedule} (UTC)")] if configuration.schedule else []),
        *([("After", _waits_for(configuration))] if configuration.depends_on else []),
        ("Runs on", where),
    ]
    return render.plan_table(rows)


def _waits_for(configuration: RunConfiguration) -> str:
    return ", ".join(f"{d.run} {d.condition.wording}" for d in configuration.depends_on)


async def _submit(
    ctx: Context,
    api: RunsClient,
    configuration: RunConfiguration,
    repo_dir: Path,
    console: Console,
    *,
    yes: bool,
    detach: bool,
) -> int:
    from cli.follow import follow_run

    name = configuration.name
    if name is not None:
        await api.check(name, configuration)  # a cycle, a secret not set: refused before a run is stopped
        active = await asyncio.to_thread(api.store.find_run, ctx.project, name)
        if active is not None and RunStatus(active.status).is_active():
            rolled = await _deploy_in_place(api, active, configuration, console, yes=yes)
            if rolled is not None:
                return rolled
            if not confirm(f"Run {name} is {active.status}. Stop it and submit anew?", yes=yes):
                return 1
            await api.stop(name)
            console.print(f"run {name}: stopping", highlight=False)
            await api.wait(name)
    submitted = await api.submit(configuration, repo_dir=repo_dir, run_name=name)
    record = submitted.run
    console.print(f"run {record.run_name} submitted (id {record.id})", highlight=False)
    for note in submitted.notes:  # where a service answers (docs/services.md)
        console.print(note, highlight=False)
    if configuration.schedule is not None:
        # It waits for its schedule (docs/schedules.md): nothing to follow now.
        console.print(schedule_line(configuration.schedule.cron), highlight=False)
        console.print(
            f"its cycles: ferry ps; run one now: ferry schedule trigger {record.run_name}", highlight=False
        )
        return 0
    if detach:
        console.print(f"follow it with: ferry logs -f {record.run_name}", highlight=False)
        return 0
    if isinstance(configuration, DevEnvironmentConfiguration):
        from cli.attach import attach_and_follow, job_routes

        # As dstack's apply does, the way its run went (docs/attach.md, docs/teams.md#attach).
        return await attach_and_follow(job_routes(ctx, api), ctx.settings.home, record, console)
    outcome = {"detached": False}

    async def on_interrupt() -> bool:
        if not sys.stdin.isatty():
            stop = False
        else:
            try:
                stop = typer.confirm("Stop the run?", default=False, err=True)
            except ABORTS:
                stop = False
        if not stop:
            outcome["detached"] = True
            console.print(
                f"detached: run {record.run_name} goes on (ferry logs -f {record.run_name}, "
                f"ferry stop {record.run_name})",
                highlight=False,
            )
            return False
        await api.stop(record.run_name)
        console.print(f"run {record.run_name}: stopping", highlight=False)
        return True

    final = await follow_run(api.store, record, status_console=console, on_interrupt=on_interrupt)
    if outcome["detached"]:
        return INTERRUPTED_EXIT
    jobs = await asyncio.to_thread(api.store.list_job_submissions, final.id)
    console.print(render.final_line(final, jobs), highlight=False, markup=False, soft_wrap=True)
    return 0 if final.status == RunStatus.DONE else 1
