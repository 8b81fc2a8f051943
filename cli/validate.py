"""`ferry validate`: check configuration files and summarise the valid ones.

A file is refused if it is invalid or if Ferry cannot run it (core.configuration.runnable); fields Ferry
accepts but does not act on yet are named in one warning line per file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import typer

from cli import exit_codes
from cli.tables import Column, FittedTable, Row
from core.configuration.loading import ConfigurationError, LoadedConfiguration
from core.configuration.pipeline import LoadedPipeline, load_run_file


def validate_files(files: Sequence[str], *, as_json: bool = False, wide: bool = False) -> int:
    """Print a summary of the valid files (a table, or JSON) and every issue of the others, one per line
    on stderr; return the exit code: 0 only if every file is valid and runnable, 2 if one is not, 1 if
    Ferry itself failed on one (cli/exit_codes.py)."""
    valid: list[LoadedConfiguration] = []
    failed = 0
    broken = 0
    for file in files:
        try:
            found = load_run_file(file)
            # Valid, but Ferry cannot run it (core.configuration.runnable): as bad as an invalid file.
            found.ensure_runnable()
        except ConfigurationError as exc:
            failed += 1
            for issue in exc.issues:
                typer.echo(str(issue), err=True)
            continue
        except (
            Exception
        ) as exc:  # a bug of ours must still read as one line about the file, never a traceback
            broken += 1
            typer.echo(f"{file}: internal error while validating: {type(exc).__name__}: {exc}", err=True)
            continue
        # A pipeline's file: one row per task (docs/pipelines.md).
        valid += found.documents if isinstance(found, LoadedPipeline) else [found]
        warning = found.warning()
        if warning:
            typer.echo(warning, err=True)
    if as_json:
        typer.echo(json.dumps(summary_json(valid), indent=2))
    elif valid:
        from cli.render import console

        console().print(summary_table(valid, wide=wide))
    return exit_codes.USAGE if failed else exit_codes.FAILED if broken else exit_codes.OK


# At 80 columns RETRY goes first, then SCALE, then SCHEDULE; RESOURCES wraps (docs/cli.md#tables).
SUMMARY_COLUMNS = (
    *map(Column, ("FILE", "TYPE", "NAME")),
    Column("RESOURCES", flexible=True),
    *(Column(header, optional=order) for header, order in (("SCALE", 2), ("RETRY", 1), ("SCHEDULE", 3))),
)


def summary_table(loaded: Sequence[LoadedConfiguration], *, wide: bool = False) -> FittedTable:
    # A summary's fields are the columns after FILE, in order (core.configuration.base.ConfigSummary).
    rows = [Row((item.file, *item.configuration.summary())) for item in loaded]
    return FittedTable(SUMMARY_COLUMNS, rows, wide=wide)


def summary_json(loaded: Sequence[LoadedConfiguration]) -> list[dict[str, Any]]:
    """`ferry validate --json`: one object per valid configuration (docs/cli.md#ferry-validate---json)."""
    return [{"file": item.file, **item.configuration.summary()._asdict()} for item in loaded]
