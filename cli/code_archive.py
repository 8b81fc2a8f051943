"""What a submission takes from where the user applies it: the configuration's `env` as applied there, and
the job's code packed from their directory (docs/runs.md#code); sent to Ferry's API, or stored by the direct
path (cli.api.FerryAPI)."""

from __future__ import annotations

import os
from pathlib import Path

from activities.code import CodeSources, MissingCodeSource, RepoTooLarge, code_sources, pack_repo, repo_id
from cli.errors import FerryError
from core.configuration import RunConfiguration


def with_environment(configuration: RunConfiguration) -> RunConfiguration:
    """`env` as applied, and each `${{ env.NAME }}` filled in (core.configuration.interpolation), from
    the environment of whoever applies it: done where the user runs `ferry apply`, never on a server."""
    try:
        return configuration.with_environment(dict(os.environ))
    except ValueError as err:
        raise FerryError(str(err)) from None


def packed_code(repo_dir: Path, configuration: RunConfiguration | None = None) -> tuple[bytes, str]:
    """The job's code archive: `repo_dir` (the configuration file's directory), or the repo and files
    the configuration names (docs/runs.md#code); and its name (repo_id)."""
    try:
        sources = CodeSources(repo_dir, [], [], repo_id(repo_dir))
        if configuration is not None:
            sources = code_sources(
                repo_dir, configuration.repos, configuration.files, configuration.working_dir
            )
        return pack_repo(sources.root, sources.extra, sources.repos), sources.name
    except (RepoTooLarge, MissingCodeSource) as err:
        raise FerryError(str(err)) from None  # the user's to fix: said as it is, nothing submitted
