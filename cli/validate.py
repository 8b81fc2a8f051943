"""`ferry validate`: check configuration files and summarise the valid ones.

A file is refused if it is invalid or if Ferry cannot run it (core.configuration.runnable); fields Ferry
accepts but does not act on yet are named in one warning line per file.
"""

from __future__ import annotations

from collections.abc import Sequence

import typer
from rich.console import Console
from rich.table import Table

from core.configuration.loading import ConfigurationError, LoadedConfiguration
from core.configuration.pipeline import LoadedPipeline, load_run_file

_PIPED_WIDTH = 240


def validate_files(files: Sequence[str]) -> int:
    """Print a summary table of the valid files and every issue of the others, one per line on stderr;
    return the exit code: 0 only if every file is valid and runnable."""
    valid: list[LoadedConfiguration] = []
    failed = 0
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
            failed += 1
            typer.echo(f"{file}: internal error while validating: {type(exc).__name__}: {exc}", err=True)
            continue
        # A pipeline's file: one row per task (docs/pipelines.md).
        valid += found.documents if isinstance(found, LoadedPipeline) else [found]
        warning = found.warning()
        if warning:
            typer.echo(warning, err=True)
    if valid:
        console = Console()
        if not console.is_terminal:
            # Piped output is read by scripts and logs, not by a person at an 80-column window: no wrapping.
            console = Console(width=_PIPED_WIDTH)
        console.print(summary_table(valid))
    return 0 if failed == 0 else 1


def summary_table(loaded: Sequence[LoadedConfiguration]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("FILE", "TYPE", "NAME", "RESOURCES", "SCALE", "RETRY", "SCHEDULE"):
        table.add_column(column, overflow="fold", no_wrap=column == "FILE")
    for item in loaded:
        summary = item.configuration.summary()
        table.add_row(
            item.file,
            summary.type,
            summary.name,
            summary.resources,
            summary.scale,
            summary.retry,
            summary.schedule,
        )
    return table
