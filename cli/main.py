"""The `ferry` command line (typer): thin commands over the modules beside this one.

Commands that need Temporal start the embedded stack (`ferry server`) in the background when no
FERRY_TEMPORAL_ADDRESS is set and none is running. Errors a user can cause are one line on stderr, with
the exit codes of cli/exit_codes.py (docs/cli.md#exit-codes). typer's --install-completion and
--show-completion give shell completion (docs/cli.md#shell-completion).
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import typer

from cli import exit_codes
from cli.backend import backend_app
from cli.errors import FerryGroup, one_line_errors, one_line_errors_as
from cli.fleet import fleet_app
from cli.schedules import schedule_app
from cli.secret import secret_app
from cli.server_commands import server_app, worker
from cli.teams import PROJECT, login, member_app, project_app, use_project, user_app
from cli.volume import volume_app
from core.status import RunStatus

HELP = (
    "Ferry runs tasks, services and dev environments as durable Temporal workflows.\n\n"
    "Without FERRY_TEMPORAL_ADDRESS, commands use the embedded stack under FERRY_HOME (default ~/.ferry), "
    "started in the background when needed: see `ferry server`.\n\n"
    "Exit codes: 0 ok, 1 failed (a run, a wait that timed out), 2 usage error or refused, 3 not found, "
    "4 server unreachable, 5 denied by Ferry's API (docs/cli.md)."
)

_SDK_BRIDGE = "temporalio.bridge.temporal_sdk_bridge"  # the SDK's native module: its Rust runtime


class FerryTyper(typer.Typer):
    """The `ferry` entry point: a command that loaded the Temporal SDK ends with `os._exit`.

    The SDK's Rust runtime keeps threads that the interpreter's teardown races with: about one exit in a
    hundred aborted with `Fatal Python error: PyGILState_Release` (exit 134) after the command had done
    its work (temporalio/sdk-python#300). Once the command is done there is nothing left to clean up
    that matters (the store's writes are committed, the embedded stack is in other processes), so the
    output is flushed and the process leaves without that teardown.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Without the SDK's native module loaded there is no Rust runtime: the ordinary exit is safe.
        try:
            result = super().__call__(*args, **kwargs)
        except SystemExit as done:
            if _SDK_BRIDGE not in sys.modules:
                raise
            code = _exit_status(done.code)
        else:
            if _SDK_BRIDGE not in sys.modules:
                return result
            code = 0
        _leave(code)


def _exit_status(code: object) -> int:
    """What `sys.exit(code)` would exit with (a message is printed to stderr, and exits 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _leave(code: int) -> NoReturn:
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader went away (`ferry ps | head`), or it is closed
            code = code or 1
    os._exit(code)


app = FerryTyper(
    name="ferry", cls=FerryGroup, no_args_is_help=True, add_completion=True, help=HELP,
    pretty_exceptions_enable=False,
)  # fmt: skip
app.add_typer(server_app, name="server")
app.add_typer(fleet_app, name="fleet")
app.add_typer(schedule_app, name="schedule")
app.add_typer(volume_app, name="volume")
app.add_typer(secret_app, name="secret")
app.add_typer(backend_app, name="backend")
app.add_typer(user_app, name="user")
app.add_typer(project_app, name="project")
app.add_typer(member_app, name="member")
app.command()(login)

RUN = typer.Argument(..., metavar="RUN", help="The run's name (or id).", show_default=False)
REPLICA = typer.Option(None, "--replica", help="Only this replica.", show_default=False)
JOB = typer.Option(
    None, "--job", help="Only this job (node) of a replica; of an array, element N.", show_default=False
)
TASK = typer.Option(
    None,
    "--task",
    metavar="N",
    help="A pipeline's task N (1-based; default: the latest).",
    show_default=False,
)


def _version(asked: bool) -> None:
    if asked:
        from core.version import ferry_version

        typer.echo(f"ferry {ferry_version()}")
        raise typer.Exit(exit_codes.OK)


@app.callback()
def _ferry(
    show_version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_version, help="Print Ferry's version and exit."
    ),
) -> None:
    # The group's own callback: nothing to do before a command (--version is eager: it exits first).
    pass


@app.command()
@one_line_errors
def validate(
    files: list[str] = typer.Argument(
        None, metavar="FILE", help="Configuration files to check.", show_default=False
    ),
    file_options: list[str] = typer.Option(
        None,
        "-f",
        "--file",
        metavar="FILE",
        help="A configuration file to check (repeatable).",
        show_default=False,
    ),
    as_json: bool = typer.Option(False, "--json", help="The valid files' summaries as JSON (docs/cli.md)."),
    wide: bool = typer.Option(False, "-v", "--wide", help="Every column, however wide."),
) -> None:
    """Check configuration files; exit 0 only if every one is valid (2 if one is not)."""
    from cli.validate import validate_files

    paths = [*(file_options or []), *(files or [])]
    if not paths:
        typer.echo("ferry validate: name at least one file (FILE... or -f FILE)", err=True)
        raise typer.Exit(exit_codes.USAGE)
    raise typer.Exit(validate_files(paths, as_json=as_json, wide=wide))


@app.command()
@one_line_errors
def apply(
    file: str = typer.Option(
        ..., "-f", "--file", metavar="FILE", help="The configuration to run.", show_default=False
    ),
    yes: bool = typer.Option(False, "-y", "--yes", help="Do not ask for confirmation."),
    detach: bool = typer.Option(
        False, "-d", "--detach", help="Submit and return, without following the run."
    ),
    name: str = typer.Option(
        None, "-n", "--name", help="The run's name, over the file's.", show_default=False
    ),
    env: list[str] = typer.Option(
        None,
        "-e",
        "--env",
        metavar="KEY=VALUE",
        help="An environment variable (repeatable).",
        show_default=False,
    ),
    after: list[str] = typer.Option(
        None,
        "--after",
        metavar="NAME[:CONDITION]",
        help="Start once run NAME is done (or: finished, failed, started); repeatable.",
        show_default=False,
    ),
    run_args: list[str] = typer.Argument(
        None,
        metavar="[-- ARGS]",
        help="Arguments for ${{ run.args }} in the commands, after --.",
        show_default=False,
    ),
    project: str | None = PROJECT,
) -> None:
    """Run a configuration: validate, show the plan, submit, then show the run's logs until it finishes.

    Exits 0 only if the run ends done (with -d: once it is submitted).
    """
    use_project(project)
    from cli.apply import apply as apply_

    code = apply_(
        file, yes=yes, detach=detach, name=name, env=env or [], after=after or [], run_args=run_args or []
    )
    raise typer.Exit(code)


@app.command()
@one_line_errors
def ps(
    all_runs: bool = typer.Option(False, "-a", "--all", help="Finished runs too."),
    watch: bool = typer.Option(False, "-w", "--watch", help="Keep the table live until Ctrl-C."),
    as_json: bool = typer.Option(False, "--json", help="JSON, for scripts (schema: docs/cli.md)."),
    limit: int = typer.Option(50, "--limit", help="At most this many runs, newest first."),
    wide: bool = typer.Option(False, "-v", "--wide", help="Every column, however wide."),
    project: str | None = PROJECT,
) -> None:
    """Runs and their jobs: status, message, resources, instance, when submitted; errors under their row.

    Fits the terminal (or COLUMNS) by leaving out columns; -v shows them all."""
    use_project(project)
    from cli.ps import ps as ps_

    ps_(all_runs=all_runs, watch=watch, as_json=as_json, limit=limit, wide=wide)


@app.command()
@one_line_errors
def metrics(
    run: str = RUN,
    watch: bool = typer.Option(
        False, "-w", "--watch", help="Refresh every 2 s until Ctrl-C or the run ends."
    ),
    as_json: bool = typer.Option(False, "--json", help="JSON, for scripts (with -w, one object per line)."),
    project: str | None = PROJECT,
) -> None:
    """CPU, memory and GPU use of each job of a run, sampled by its agent now (docs/jobs.md#metrics)."""
    use_project(project)
    from cli.metrics import metrics as metrics_

    raise typer.Exit(metrics_(run, watch=watch, as_json=as_json))


@app.command()
@one_line_errors
def token(
    rotate: bool = typer.Option(False, "--rotate", help="A new token; the old one stops working."),
) -> None:
    """Your token: what a service with `auth` (the default) asks for, as `Authorization: Bearer <token>`."""
    from cli.user_tokens import print_token

    print_token(rotate=rotate)


@app.command()
@one_line_errors
def logs(
    run: str = RUN,
    follow: bool = typer.Option(False, "-f", "--follow", help="Follow until the run finishes."),
    replica: int = REPLICA,
    job: int = JOB,
    since: str = typer.Option(
        None, "--since", metavar="DURATION", help="Only what was logged in the last DURATION (90s, 5m, 1h)."
    ),
    task: int = TASK,
    cycle: int = typer.Option(
        None,
        "--cycle",
        metavar="N",
        help="A scheduled run's cycle N (default: the latest).",
        show_default=False,
    ),
    project: str | None = PROJECT,
) -> None:
    """A run's logs (every job's, prefixed when several); a pipeline's latest task's, or --task N's."""
    use_project(project)
    from cli.logs import logs as logs_

    logs_(run, follow=follow, replica=replica, job=job, since=since, task=task, cycle=cycle)


@app.command()
@one_line_errors
def attach(
    run: str = RUN,
    replica: int = typer.Option(0, "--replica", metavar="N", help="The replica's job to attach to."),
    job: int = typer.Option(0, "--job", metavar="N", help="The job (node) of that replica."),
    no_logs: bool = typer.Option(False, "--no-logs", help="Do not stream the job's logs."),
    project: str | None = PROJECT,
) -> None:
    """SSH into a running job: `ssh RUN` (and scp, rsync, VS Code) with your own OpenSSH, its `ports`
    forwarded to localhost, until Ctrl-C (docs/attach.md)."""
    use_project(project)
    from cli.attach import attach_command

    raise typer.Exit(attach_command(run, replica=replica, job=job, logs=not no_logs))


@app.command()
@one_line_errors
def stop(
    run: str = RUN,
    abort: bool = typer.Option(False, "-x", "--abort", help="Kill at once, with no graceful stop."),
    yes: bool = typer.Option(False, "-y", "--yes", help="Do not ask for confirmation."),
    project: str | None = PROJECT,
) -> None:
    """Stop a run (SIGTERM, then SIGKILL after its stop_duration), and wait until it has finished."""
    use_project(project)
    from cli.stop import stop as stop_

    raise typer.Exit(stop_(run, abort=abort, yes=yes))


@app.command()
@one_line_errors
def delete(
    run: str = RUN,
    yes: bool = typer.Option(False, "-y", "--yes", help="Do not ask for confirmation."),
    project: str | None = PROJECT,
) -> None:
    """Forget a finished run: its records, events, logs and Temporal workflows (not an active run)."""
    use_project(project)
    from cli.delete import delete as delete_

    raise typer.Exit(delete_(run, yes=yes))


@app.command()
@one_line_errors
def offer(
    file: str = typer.Option(
        ..., "-f", "--file", metavar="FILE", help="The configuration to place.", show_default=False
    ),
    as_json: bool = typer.Option(False, "--json", help="JSON, for scripts (docs/cli.md#offer)."),
    wide: bool = typer.Option(False, "-v", "--wide", help="Every column, however wide."),
    project: str | None = PROJECT,
) -> None:
    """Which instances could run FILE now, which once others' jobs end, which never, and why."""
    use_project(project)
    from cli.offer import offer as offer_

    raise typer.Exit(offer_(file, as_json=as_json, wide=wide))


@app.command()
@one_line_errors
def events(
    run: str = RUN,
    replica: int = REPLICA,
    job: int = JOB,
    submission: int = typer.Option(
        None, "--submission", help="That submission of the job (default: the latest).", show_default=False
    ),
    follow: bool = typer.Option(False, "-f", "--follow", help="Follow until the final event (clean)."),
    as_json: bool = typer.Option(False, "--json", help="JSON lines: {timestamp, name, context}."),
    task: int = TASK,
    project: str | None = PROJECT,
) -> None:
    """The run's eventlog, or with --replica/--job one job's; a pipeline's task's with --task N."""
    use_project(project)
    from cli.events import events as events_

    events_(run, replica=replica, job=job, submission=submission, follow=follow, as_json=as_json, task=task)


@app.command()
@one_line_errors
def wait(
    run: str = RUN,
    status: RunStatus = typer.Option(
        None, "--status", help="Until the run reaches this status.", show_default=False
    ),
    event: str = typer.Option(
        None,
        "--event",
        metavar="NAME",
        help="Until an event of this name is logged (run or jobs).",
        show_default=False,
    ),
    timeout: str = typer.Option(
        None, "--timeout", metavar="DURATION", help="Give up after DURATION.", show_default=False
    ),
    project: str | None = PROJECT,
) -> None:
    """Wait until the run reaches a status, logs an event, or (by default) finishes.

    Exits 0 when reached, 1 on timeout, 2 when it can no longer happen (the run finished first), 3 if
    there is no such run.
    """
    use_project(project)
    from cli.wait import wait as wait_

    raise typer.Exit(wait_(run, status=status, event=event, timeout=timeout))


@app.command("set-priority")
@one_line_errors_as("ferry set-priority")
def set_priority(
    run: str = RUN,
    priority: int = typer.Argument(..., metavar="N", min=0, max=100, help="0-100, higher first."),
    project: str | None = PROJECT,
) -> None:
    """Move a run's waiting jobs in their fleet's queue."""
    use_project(project)
    from cli.fleet import set_priority as set_priority_

    set_priority_(run, priority)


app.command()(worker)  # cli/server_commands.py: listed last, after the run commands
