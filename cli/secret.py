"""`ferry secret set|repo|list|delete` and `ferry secret codec` (docs/secrets.md).

Thin commands over cli.secret_clients: through Ferry's API as the logged-in user, which seals each value
and records who changed what (docs/teams.md#secrets). A value is never an argument (a command line is
visible to every user of the machine and kept in shell histories): `set` reads it from a prompt that does
not echo it, or whole from stdin.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from cli.errors import FerryGroup, one_line_errors
from cli.teams import PROJECT, use_project

if TYPE_CHECKING:
    from rich.table import Table

    from api.messages import SecretInfo

secret_app = typer.Typer(
    cls=FerryGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Secrets: values a run names as ${{ secrets.NAME }} in `env` and `registry_auth`, filled in when "
    "its jobs start. Stored sealed with Ferry's key, never shown again.",
)  # fmt: skip

NAME = typer.Argument(..., metavar="NAME", help="The secret's name.", show_default=False)


@secret_app.command("set")
@one_line_errors
def secret_set(name: str = NAME, project: str | None = PROJECT) -> None:
    """Set a secret, or change its value: typed at a prompt that does not echo it, or piped to stdin."""
    use_project(project)
    from cli.context import Context
    from cli.errors import USAGE_EXIT, CommandError
    from core.secrets import check_secret_name

    try:
        check_secret_name(name)  # before the value is asked for: a bad name wastes no typing
    except ValueError as err:
        raise CommandError(str(err), USAGE_EXIT) from None
    value = _read_value(name)
    created = Context.from_env().secrets().set(name, value)
    typer.echo(f"secret {name} {'set' if created else 'changed'}", err=True)


def _read_value(name: str) -> str:
    from cli.errors import USAGE_EXIT, CommandError
    from core.secrets import check_secret_value

    if sys.stdin.isatty():
        import getpass

        value = getpass.getpass(f"Value of {name} (not shown): ", stream=sys.stderr)
    else:
        value = sys.stdin.read()
        # `echo VALUE | ferry secret set NAME`: the line's end is not the secret's.
        value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise CommandError("the value is empty: type it at the prompt, or pipe it to stdin", USAGE_EXIT)
    try:
        check_secret_value(value)  # before it is sent anywhere
    except ValueError as err:
        raise CommandError(str(err), USAGE_EXIT) from None
    return value


@secret_app.command("repo")
@one_line_errors
def secret_repo(
    url: str = typer.Argument(
        ..., metavar="URL", help="The repo's URL, as `repos` names it.", show_default=False
    ),
    ssh_key: Path | None = typer.Option(
        None, "--ssh-key", metavar="FILE", help="An SSH private key to clone with, in place of a token."
    ),
    project: str | None = PROJECT,
) -> None:
    """A private repo's credentials (dstack's `dstack init --token`, `--git-identity`): an HTTPS token
    typed at a prompt that does not echo it, or piped to stdin; or an SSH private key's file. Kept as a
    sealed secret named after the URL; a job cloning that URL gets it (docs/runs.md#private-repos)."""
    from cli.context import Context
    from cli.errors import USAGE_EXIT, CommandError

    use_project(project)
    if ssh_key is not None:
        try:
            value = ssh_key.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise CommandError(f"--ssh-key: cannot read {ssh_key}: {err}", USAGE_EXIT) from None
    else:
        value = _read_value(f"the token for {url}")
    name = Context.from_env().secrets().set_repo(url, value, ssh_key=ssh_key is not None)
    kind = "SSH key" if ssh_key is not None else "token"
    typer.echo(f"{kind} for {url} stored as secret {name}", err=True)


@secret_app.command("list")
@one_line_errors
def secret_list(
    as_json: bool = typer.Option(False, "--json", help="JSON, for scripts."), project: str | None = PROJECT
) -> None:
    """Secrets: their names, the key each is sealed with, when each was set and by whom. Never their
    values."""
    use_project(project)
    from cli import render
    from cli.context import Context

    listed = Context.from_env().secrets().listed()
    if not as_json:
        render.console().print(secrets_table(listed))
    else:
        typer.echo(json.dumps([secret_json(secret) for secret in listed], indent=2))


@secret_app.command("delete")
@one_line_errors
def secret_delete(
    name: str = NAME,
    yes: bool = typer.Option(False, "-y", "--yes", help="Do not ask for confirmation."),
    project: str | None = PROJECT,
) -> None:
    """Delete a secret: a job that names it fails to start from then on."""
    use_project(project)
    from cli.context import Context, confirm

    if not confirm(f"Delete secret {name}?", yes=yes):
        raise typer.Exit(1)
    Context.from_env().secrets().delete(name)
    typer.echo(f"secret {name} deleted", err=True)


@secret_app.command("codec")
@one_line_errors
def secret_codec() -> None:
    """The Web UI's codec endpoint (its Data Encoder setting), to see what Ferry seals; keep it private."""
    from cli.context import Context
    from cli.errors import CommandError
    from cli.services import proxy_url
    from gateway.codec_endpoint import codec_endpoint
    from store.keys import process_keys

    base = proxy_url(Context.from_env().store())
    if base is None:
        raise CommandError("no proxy is running, and it serves the codec endpoint: start it (ferry server)")
    typer.echo(codec_endpoint(base, process_keys()))


# --- what is shown ---------------------------------------------------------------------------------------


def secrets_table(secrets: list[SecretInfo]) -> Table:
    from rich.table import Table

    from cli.render import ago

    table = Table(box=None, pad_edge=False)
    for column in ("NAME", "KEY", "UPDATED", "BY"):
        table.add_column(column, no_wrap=True)
    for secret in secrets:
        table.add_row(secret.name, secret.key, ago(secret.updated_at), secret.updated_by or "-")
    return table


def secret_json(secret: SecretInfo) -> dict[str, Any]:
    return {
        "name": secret.name,
        "key": secret.key,
        "created_at": secret.created_at,
        "updated_at": secret.updated_at,
        "updated_by": secret.updated_by,
    }
