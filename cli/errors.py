"""One clear line for every error a user can cause, and never a traceback.

`FerryGroup` turns usage errors (a bad flag, a missing argument) into `ferry <cmd>: <message>` with exit
code 2; `one_line_errors` wraps each command so that Ferry's own errors, configuration errors and an
unreachable server come out as `ferry <cmd>: <message>`, each with its exit code (cli/exit_codes.py,
docs/cli.md#exit-codes). FERRY_DEBUG=1 shows the traceback of an unexpected error instead.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

import typer
from typer.core import TyperGroup

from cli import exit_codes

P = ParamSpec("P")
R = TypeVar("R")

USAGE_EXIT = exit_codes.USAGE


def _click_aborts() -> tuple[type[BaseException], ...]:
    # typer 0.2x bundles its own click and raises typer.Abort; older ones ran on click's.
    try:
        import click
    except ImportError:
        return (typer.Abort,)
    return (typer.Abort, click.Abort)


# Ctrl-C or end of input at a prompt.
ABORTS = _click_aborts()


class FerryError(Exception):
    """Something a user can fix; its message is one clear line. A refusal: exit code 2 (USAGE)."""

    exit_code = exit_codes.USAGE


class NotFound(FerryError):
    """No such run, fleet, volume or secret: exit code 3."""

    exit_code = exit_codes.NOT_FOUND


class RunNotFound(NotFound):
    pass


class RunActive(FerryError):
    pass


class CodeMissing(FerryError):
    """A submission whose code the store does not hold (yet): the CLI sends it, then submits again."""

    exit_code = exit_codes.FAILED


class RunStuck(FerryError):
    """The run's workflow cannot go on (cli/stuck.py): it can take no stop, no deploy: exit code 1."""

    exit_code = exit_codes.FAILED


class CommandError(Exception):
    """An error of the command line itself, with its exit code (1 unless said)."""

    def __init__(self, message: str, exit_code: int = exit_codes.FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class UnreachableServer(CommandError):
    def __init__(self, message: str, exit_code: int = exit_codes.UNREACHABLE) -> None:
        super().__init__(message, exit_code)


def say(command: str, message: str) -> None:
    typer.echo(f"{command}: {message}", err=True)


class FerryGroup(TyperGroup):
    """The top-level group: usage errors are one line, `ferry <cmd>: <message> (see ferry <cmd> --help)`."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        problem: tuple[str, str, int] | None = None
        try:
            result = super().main(args, prog_name or "ferry", complete_var, standalone_mode=False, **extra)
        except ABORTS:
            problem = ("ferry", "aborted", 1)
        except Exception as err:
            # Click's exceptions, whichever click typer runs on (it may bundle its own), by their shape.
            if not _is_click_exception(err):
                raise
            message, code = getattr(err, "format_message"), getattr(err, "exit_code")  # noqa: B009
            where = self._command_words(sys.argv[1:] if args is None else list(args))
            text = _sentence(str(message()))
            if any(cls.__name__ == "UsageError" for cls in type(err).__mro__):
                problem = (where, f"{text} (see {where} --help)", USAGE_EXIT)
            else:
                problem = (where, text, code)
        if problem is not None:
            # Reported outside the except block: see one_line_errors.
            say(problem[0], problem[1])
            result = problem[2]
        if not standalone_mode:
            return result
        sys.exit(result if isinstance(result, int) else 0)

    def _command_words(self, args: list[str]) -> str:
        """`ferry server start`: the (sub)commands named in the arguments, for an error's first words."""
        words, command = ["ferry"], self
        for arg in args:
            subcommands = getattr(command, "commands", None)
            if arg.startswith("-") or not isinstance(subcommands, dict) or arg not in subcommands:
                break
            words.append(arg)
            command = subcommands[arg]
        return " ".join(words)


def _is_click_exception(err: BaseException) -> bool:
    return callable(getattr(err, "format_message", None)) and isinstance(getattr(err, "exit_code", None), int)


def _sentence(message: str) -> str:
    """Click's messages start with a capital and end with a period; ours are lower-case clauses."""
    message = " ".join(message.split()).replace("Value error, ", "")
    if message[:1].isupper() and not message[1:2].isupper():
        message = message[0].lower() + message[1:]
    return message.rstrip(".")


def one_line_errors(function: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command: its errors become one line on stderr and their exit code (exit_code_of).

    The line starts with `ferry <command>`, from the function's name (`server_start`: `ferry server start`);
    a command whose name has a `-` says it with one_line_errors_as.
    """
    return _one_line(function, "ferry " + function.__name__.replace("_", " "))


def one_line_errors_as(command: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """one_line_errors, its lines starting with `command` (`ferry set-priority`)."""
    return lambda function: _one_line(function, command)


def _one_line(function: Callable[P, R], command: str) -> Callable[P, R]:
    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        problem: str | None = None
        code = exit_codes.FAILED
        try:
            return function(*args, **kwargs)
        except typer.Exit:
            raise
        except ABORTS:
            raise
        except CommandError as err:
            problem, code = str(err), err.exit_code
        except KeyboardInterrupt:
            problem, code = "interrupted", exit_codes.INTERRUPTED
        except BrokenPipeError:
            # The reader went away (`ferry ps --json | head`): nothing more to say, and nowhere to say it.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(exit_codes.FAILED) from None
        except Exception as err:
            if os.environ.get("FERRY_DEBUG") or _is_click_exception(err):
                raise
            from core.configuration.loading import (
                ConfigurationError,  # imported already if that is what this is
            )

            if isinstance(err, ConfigurationError) and err.issues:
                # Every issue of the file, one per line: the last one is the error's line.
                for issue in err.issues[:-1]:
                    say(command, str(issue))
                problem = str(err.issues[-1])
            else:
                problem = describe(err)
            code = exit_code_of(err)
        # The error is reported and the exit raised outside the except block: an exception that holds
        # the Temporal SDK's runtime (a failed connect) must not live on into interpreter shutdown.
        say(command, problem)
        raise typer.Exit(code)

    wrapper.ferry_command = command  # type: ignore[attr-defined]  # tests/cli: what a user typed
    return wrapper


def exit_code_of(err: BaseException) -> int:
    """A refusal or an invalid configuration 2, what does not exist 3, no server 4, anything else 1."""
    from core.configuration.loading import ConfigurationError
    from core.temporal_connection import ConnectionSettingsError
    from embedded.stack import StackError

    if isinstance(err, FerryError | CommandError):
        return err.exit_code
    if isinstance(err, ConfigurationError | ConnectionSettingsError):  # a file's, or TEMPORAL_TLS_*'s
        return exit_codes.USAGE
    if isinstance(err, StackError):
        return exit_codes.UNREACHABLE
    return exit_codes.FAILED


def describe(err: BaseException) -> str:
    """One line about an exception: Ferry's own errors by their message, others by type and message."""
    if isinstance(err, FerryError):
        return str(err)
    from embedded.stack import StackError

    if isinstance(err, StackError):
        return f"cannot start the embedded stack: {err}"
    from store.keys import SealError

    if isinstance(err, SealError):  # Ferry's key (docs/secrets.md): what is wrong with it, as it is
        return str(err)
    from core.temporal_connection import ConnectionSettingsError

    if isinstance(err, ConnectionSettingsError):  # TEMPORAL_TLS_*, TEMPORAL_API_KEY (docs/deployment.md)
        return str(err)
    text = " ".join(str(err).split())
    if isinstance(err, OSError) and err.strerror:
        name = f" {err.filename}" if err.filename else ""
        return f"{err.strerror}{':' + name if name else ''}"
    return f"internal error: {type(err).__name__}: {text} (FERRY_DEBUG=1 shows the traceback)"


def connect_problem(address: str, message: str) -> str:
    """`Client.connect`'s Rust error, in a few words (a TLS problem in words that name its setting)."""
    from core.temporal_connection import tls_problem

    found = re.search(r'message: "([^"]+)"', message) or re.search(r'error: "([^"]+)"', message)
    reason = tls_problem(message) or (
        found.group(1) if found else message.removeprefix("Failed client connect: ")
    )
    return f"cannot reach the Temporal server at {address}: {' '.join(reason.split())[:200]}"
