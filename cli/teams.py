"""`ferry login`, `ferry user`, `ferry project` and `ferry member` (docs/teams.md): thin commands over Ferry's
API (cli/api_client.py). A token is never an argument: `login` reads it from a prompt that does not echo
it, or from stdin; a new one is printed once, on stdout, for a script to keep."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import typer

from cli.errors import FerryGroup, one_line_errors, one_line_errors_as


def _app(help_text: str) -> typer.Typer:
    return typer.Typer(
        cls=FerryGroup,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        help=help_text,
    )


user_app = _app("Users of a shared Ferry and their tokens (a global admin's; docs/teams.md).")
project_app = _app("Projects: what runs, fleets, volumes, secrets and backends belong to (docs/teams.md).")
member_app = _app("A project's members and their roles: manager or user (docs/teams.md#roles).")

NAME = typer.Argument(..., metavar="NAME", help="The user's name.", show_default=False)
PROJECT_NAME = typer.Argument(..., metavar="PROJECT", help="The project's name.", show_default=False)
JSON = typer.Option(False, "--json", help="JSON on stdout.")
PROJECT = typer.Option(
    None,
    "-p",
    "--project",
    metavar="PROJECT",
    help="The project (default: FERRY_PROJECT, or main).",
    show_default=False,
)


def use_project(project: str | None) -> None:
    """`-p/--project` of a run command: the project this command acts in, over FERRY_PROJECT's."""
    if project is not None:
        os.environ["FERRY_PROJECT"] = project


def _project(project: str | None) -> str:
    from core.settings import DEFAULT_PROJECT

    return project or os.environ.get("FERRY_PROJECT") or DEFAULT_PROJECT


def _show(path: str, as_json: bool, header: list[str], row: Callable[[dict[str, Any]], list[str]]) -> None:
    """What the API answers at `path`: its JSON as it is, or a table of one row per item."""
    from cli.api_client import call

    items = call("GET", path)
    if as_json:
        typer.echo(json.dumps(items))
        return
    rows = [header, *(row(item) for item in items)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for cells in rows:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip())


@one_line_errors
def login(
    url: str = typer.Argument(..., metavar="URL", help="Ferry's API, e.g. https://ferry.example.com"),
) -> None:
    """Keep the API's URL and your token for every later command (FERRY_HOME/login.json, yours only):
    the token typed at a prompt that does not echo it, or piped to stdin."""
    from cli.api_client import call
    from cli.errors import USAGE_EXIT, CommandError
    from cli.login_file import save_login

    if sys.stdin.isatty():
        import getpass

        token = getpass.getpass("Token (not shown): ", stream=sys.stderr).strip()
    else:
        token = sys.stdin.read().strip()
    if not token:
        raise CommandError("the token is empty: type it at the prompt, or pipe it to stdin", USAGE_EXIT)
    me = call("GET", "/api/me", url=url.rstrip("/"), token=token)
    save_login(url, token)
    typer.echo(f"logged in to {url.rstrip('/')} as {me['name']} ({me['role']})", err=True)


@user_app.command("add")
@one_line_errors
def user_add(name: str = NAME, admin: bool = typer.Option(False, "--admin", help="A global admin.")) -> None:
    """Add a user; their token is printed once, on stdout."""
    from cli.api_client import call

    issued = call("POST", "/api/users", {"name": name, "role": "admin" if admin else "user"})
    typer.echo(f"user {name} added; give them this token (it is not shown again):", err=True)
    typer.echo(issued["token"])


@user_app.command("list")
@one_line_errors
def user_list(as_json: bool = JSON) -> None:
    """Every user, their global role, and whether they have a token."""
    _show("/api/users", as_json, ["NAME", "ROLE", "TOKEN"], lambda u: [u["name"], u["role"], _token(u)])


def _token(user: dict[str, Any]) -> str:
    return "yes" if user["has_token"] else "revoked"


@user_app.command("set-role")
@one_line_errors_as("ferry user set-role")
def user_set_role(
    name: str = NAME,
    role: str = typer.Argument(..., metavar="ROLE", help="admin or user.", show_default=False),
) -> None:
    """Set a user's global role."""
    from cli.api_client import call

    call("PUT", f"/api/users/{name}/role", {"role": role})
    typer.echo(f"user {name} is now {role}", err=True)


@user_app.command("rotate")
@one_line_errors
def user_rotate(name: str = NAME) -> None:
    """A new token for a user (yours, or anyone's as an admin); the old one stops working at once. It is
    printed once, on stdout; your own is kept for the next commands too."""
    from cli.api_client import call, login
    from cli.login_file import save_login

    url, token = login()
    mine = call("GET", "/api/me", url=url, token=token)["name"] == name
    issued = call("POST", f"/api/users/{name}/token", url=url, token=token)
    if mine and not os.environ.get("FERRY_TOKEN"):
        save_login(url, issued["token"])
    typer.echo(issued["token"])


@user_app.command("revoke")
@one_line_errors
def user_revoke(name: str = NAME) -> None:
    """Revoke a user's token: nothing opens as them until `ferry user rotate` gives them a new one."""
    from cli.api_client import call

    call("DELETE", f"/api/users/{name}/token")
    typer.echo(f"user {name}: token revoked", err=True)


@project_app.command("add")
@one_line_errors
def project_add(name: str = PROJECT_NAME) -> None:
    """Add a project (a global admin's); you are its manager."""
    from cli.api_client import call

    call("POST", "/api/projects", {"name": name})
    typer.echo(f"project {name} added", err=True)


@project_app.command("list")
@one_line_errors
def project_list(as_json: bool = JSON) -> None:
    """The projects you belong to (every one, for an admin)."""
    _show("/api/projects", as_json, ["NAME", "CREATED BY"], lambda p: [p["name"], p["created_by"] or "-"])


@project_app.command("changes")
@one_line_errors
def project_changes(project: str | None = PROJECT, as_json: bool = JSON) -> None:
    """Who set, changed and deleted the project's secrets, fleets and backends, and when: the latest 100."""
    import time

    def row(change: dict[str, Any]) -> list[str]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(change["at"]))
        return [when, change["actor"], change["subject"], change["name"], change["change"]]

    path = f"/api/projects/{_project(project)}/changes"
    _show(path, as_json, ["WHEN", "BY", "WHAT", "NAME", "CHANGE"], row)


@project_app.command("delete")
@one_line_errors
def project_delete(name: str = PROJECT_NAME) -> None:
    """Delete a project that holds nothing any more (a global admin's)."""
    from cli.api_client import call

    call("DELETE", f"/api/projects/{name}")
    typer.echo(f"project {name} deleted", err=True)


@member_app.command("list")
@one_line_errors
def member_list(project: str | None = PROJECT, as_json: bool = JSON) -> None:
    """The project's members and their roles."""
    path = f"/api/projects/{_project(project)}/members"
    _show(path, as_json, ["USER", "ROLE"], lambda m: [m["user"], m["role"]])


@member_app.command("set")
@one_line_errors
def member_set(
    name: str = NAME,
    role: str = typer.Argument(..., metavar="ROLE", help="manager or user.", show_default=False),
    project: str | None = PROJECT,
) -> None:
    """Make a user a member of the project with this role (a manager's)."""
    from cli.api_client import call

    call("PUT", f"/api/projects/{_project(project)}/members/{name}", {"role": role})
    typer.echo(f"{name} is a {role} of project {_project(project)}", err=True)


@member_app.command("remove")
@one_line_errors
def member_remove(name: str = NAME, project: str | None = PROJECT) -> None:
    """A user is a member of the project no more (a manager's)."""
    from cli.api_client import call

    call("DELETE", f"/api/projects/{_project(project)}/members/{name}")
    typer.echo(f"{name} removed from project {_project(project)}", err=True)
